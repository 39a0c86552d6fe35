"""The recovery constraint (v4): a label for every segment of the response, in order, sources only among those
shown, and the abstention exactly when the labels do not settle SUFFICIENT; and the export of a verdict's inline
citations, which name any source id in a form that reads back exactly."""

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.exceptions import CitationError
from suffice.gates.recovery.citing import cite, strip_markers
from suffice.gates.recovery.decision import SufficiencyThreshold
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.recovery.grammar import (
    CITATION,
    SEED_SCHEMA,
    Classification,
    JudgedSegment,
    RecoveryBounds,
    RecoveryOutput,
    RecoveryVerdict,
    parse_citations,
    recovery_constraint,
)
from suffice.gates.recovery.segments import segment
from suffice.prompts.fitting import FittedPrompt, ShownChunk
from suffice.records.item import Chunk, Item
from tests.grammars.drawing import allowed_strings
from tests.grammars.segments import assert_splits_into_segments

B = RecoveryBounds


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


#: Two segments judged against two sources: every claim supported (the close), and one not (the abstention).
SUFFICIENT = {
    "classification": "SUFFICIENT",
    "segments": [[0, "supported", [1]], [1, "supported", [0, 1]]],
}
ABSTAIN = {
    "classification": "PARTIALLY_SUFFICIENT",
    "segments": [[0, "supported", [1]], [1, "unsupported", []]],
    "abstention_notice": "The year is not in the evidence.",
    "suggested_retrieval_queries": ["Ada Lovelace notes publication year"],
}


def parsed(text: str, response: str, sources: list[str]) -> RecoveryVerdict:
    """``text`` read by the gate as the one window's output for ``response`` judged against chunks of ``sources``
    (distinct ids, one chunk each), as the judge would after fitting."""
    found = segment(response)
    shown = tuple(ShownChunk(label=i, id=i, text="evidence", source=s, truncated=False) for i, s in enumerate(sources))
    fitted = FittedPrompt(
        messages=(),
        shown=shown,
        constraint=recovery_constraint(len(sources), 0, len(found)),
        truncated_chunk_ids=[],
        omitted_chunk_ids=[],
        question_truncated=False,
        segments=tuple(found),
    )
    item = Item("r", "Q?", tuple(Chunk(i, "evidence", s) for i, s in enumerate(sources)), response)
    return RecoveryGate(SufficiencyThreshold.loose()).parse(text, fitted, item)


def test_both_branches_accepted():
    c = recovery_constraint(2, 0, 2)
    assert c.matches(dumps(SUFFICIENT)) and c.matches(dumps(ABSTAIN))
    insufficient = {**ABSTAIN, "classification": "INSUFFICIENT", "segments": [[0, "no_claim", []], [1, "partial", [0]]]}
    assert c.matches(dumps(insufficient))


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (
            {**SUFFICIENT, "segments": [[0, "supported", [1]], [1, "supported", [2]]]},
            "source 2 not in a 2-source request",
        ),
        ({**SUFFICIENT, "segments": [[0, "supported", [1]], [1, "supported", ["Wikipedia"]]]}, "a source by name"),
        ({**SUFFICIENT, "segments": [[0, "supported", [1]], [1, "supported", [1, 0, 1, 0]]]}, "over the source bound"),
        (
            {**SUFFICIENT, "segments": [[0, "supported", [1]], [1, "unsupported", []]]},
            "SUFFICIENT, unsupported, no notice",
        ),
        ({**SUFFICIENT, "abstention_notice": "n", "suggested_retrieval_queries": ["q"]}, "abstention with SUFFICIENT"),
        ({**ABSTAIN, "answer": "Ada [CITATION:0]"}, "an answer field"),
        ({k: v for k, v in ABSTAIN.items() if k != "suggested_retrieval_queries"}, "no queries"),
        ({**ABSTAIN, "suggested_retrieval_queries": []}, "empty queries"),
        ({**ABSTAIN, "suggested_retrieval_queries": ["q"] * (B.QUERIES_MAX + 1)}, "too many queries"),
        ({**ABSTAIN, "abstention_notice": ""}, "an empty notice"),
        ({**ABSTAIN, "abstention_notice": "x" * (B.NOTICE_CHARS + 1)}, "a notice over its bound"),
        ({**ABSTAIN, "suggested_retrieval_queries": ["x" * (B.QUERY_CHARS + 1)]}, "a query over its bound"),
        ({k: v for k, v in ABSTAIN.items() if k != "abstention_notice"}, "queries without a notice"),
        ({**ABSTAIN, "classification": "MAYBE"}, "unknown class"),
        ({**ABSTAIN, "segments": [[0, "maybe", []], [1, "unsupported", []]]}, "unknown label"),
        ({**ABSTAIN, "segments": [[0, "supported", [1]], [1, "unsupported", []], [2, "no_claim", []]]}, "a third"),
        ({**ABSTAIN, "segments": [[1, "supported", [1]], [0, "unsupported", []]]}, "out of order"),
        ({**ABSTAIN, "segments": [[0, "supported", [1]]]}, "a segment left out"),
        ({**ABSTAIN, "segments": [[0, "supported", [1]], [1, "no_claim", [0]]]}, "a no_claim citing"),
        ({**ABSTAIN, "segments": [[0, "partial", []], [1, "unsupported", []]]}, "partial support from nothing"),
    ],
)
def test_conditional_fields_and_sources_by_construction(obj, why):
    assert not recovery_constraint(2, 0, 2).matches(dumps(obj)), why


@pytest.mark.parametrize(
    "text",
    [
        '{"classification":"SUFFICIENT","segments":[[0, "supported",[0]]]}',
        '{"classification":"SUFFICIENT","segments":[[0,"supported",[ 0]]]}',
        '{"classification":"SUFFICIENT","segments":[[0,"supported",[0]]]} ',
        ' {"classification":"SUFFICIENT","segments":[[0,"supported",[0]]]}',
        '{"classification":"SUFFICIENT","segments":[[0,"supported",[0],"and a note"]]}',
    ],
)
def test_an_output_holds_no_text_but_its_labels_sources_and_abstention(text):
    """The model writes no free text beside the abstention: no blank, no note anywhere else."""
    c = recovery_constraint(1, 0, 1)
    assert c.matches('{"classification":"SUFFICIENT","segments":[[0,"supported",[0]]]}')
    assert not c.matches(text)


@pytest.mark.parametrize("first", [0, 7, 30])
def test_worst_case_is_exact(first):
    wide = "\u4e2d"
    c = recovery_constraint(12, first, 3)
    entries = [[first + i, "supported", [11] * B.SOURCES_MAX] for i in range(3)]
    sufficient = {"classification": "SUFFICIENT", "segments": entries}
    other = {
        "classification": "PARTIALLY_SUFFICIENT",
        "segments": entries,
        "abstention_notice": wide * B.NOTICE_CHARS,
        "suggested_retrieval_queries": [wide * B.QUERY_CHARS] * B.QUERIES_MAX,
    }
    sizes = []
    for obj in (sufficient, other):
        text = dumps(obj)
        assert c.matches(text)
        sizes.append(len(text.encode()))
    assert max(sizes) == c.max_bytes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_every_allowed_string_parses_and_exports_to_the_seed_schema(data):
    m = data.draw(st.integers(min_value=1, max_value=4))
    count = data.draw(st.integers(min_value=1, max_value=3))
    c = recovery_constraint(m, 0, count)
    # The pattern allows an abstention after any labels; the constraint's check keeps the ones it must follow.
    text = data.draw(allowed_strings(c.pattern).filter(c.matches))
    out = RecoveryOutput.model_validate(json.loads(text))
    assert [index for index, _, _ in out.segments] == list(range(count))
    assert_splits_into_segments(c, text)
    sources = [f"doc-{i}" for i in range(m)]
    response = " ".join(f"Claim {i} holds." for i in range(count))
    verdict = parsed(text, response, sources)
    jsonschema.validate(verdict.to_seed(), SEED_SCHEMA)
    assert set(verdict.cited_sources) <= set(sources)
    assert verdict.cited_sources == list(dict.fromkeys(s for seg in verdict.segments for s in seg.sources))
    # SUFFICIENT cites: every claim is supported, and there is at least one.
    if verdict.classification is Classification.SUFFICIENT:
        assert verdict.cited_sources and verdict.model_classification is Classification.SUFFICIENT
    # The cited answer is the response with a marker after each source a segment names, nothing else.
    assert strip_markers(verdict.cited_answer) == response
    assert len(parse_citations(verdict.cited_answer)) == sum(len(seg.sources) for seg in verdict.segments)


def test_source_numbers_become_the_callers_ids_in_the_order_named():
    text = dumps(
        {
            "classification": "SUFFICIENT",
            "segments": [[0, "supported", [1]], [1, "supported", [0]], [2, "supported", [1]]],
        }
    )
    verdict = parsed(text, "A is true. B is true. C is true.", ["s0", "s1"])
    assert verdict.cited_answer == "A is true.[CITATION:s1] B is true.[CITATION:s0] C is true.[CITATION:s1]"
    assert verdict.cited_sources == ["s1", "s0"]


@pytest.mark.parametrize("n_sources", [1, 3, 40])
def test_the_large_segments_are_the_same_for_every_source_count(n_sources):
    c = recovery_constraint(n_sources, 0, 2)
    assert c.first_segment() == recovery_constraint(1, 0, 1).first_segment()
    text = dumps({**ABSTAIN, "segments": [[0, "supported", [0]], [1, "unsupported", []]]})
    keys = [segment.key for segment, _ in c.segments_of(text)]
    assert [k for k in keys if k != f"recovery/entry/{n_sources}"] == ["recovery/decision", "recovery/abstention"]
    # One entry form for every index, and one constraint key for every window of the same shape.
    assert keys.count(f"recovery/entry/{n_sources}") == 2
    assert recovery_constraint(n_sources, 30, 2).key == c.key


def test_only_the_decision_segment_asks_for_log_probabilities():
    pieces = recovery_constraint(2, 0, 2).segments_of(dumps(SUFFICIENT))
    assert [segment.key for segment, _ in pieces if segment.logprobs] == ["recovery/decision"]


HEAD = ["recovery/decision"]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_an_output_is_generated_in_segments_that_compose_to_it(count):
    c = recovery_constraint(3, 0, count)
    text = dumps({"classification": "SUFFICIENT", "segments": [[i, "supported", [2, 0]] for i in range(count)]})
    pieces = c.segments_of(text)
    assert [segment.key for segment, _ in pieces] == [*HEAD, *["recovery/entry/3"] * count, "recovery/close"]
    assert "".join(piece for _, piece in pieces) == text


def test_an_abstention_is_one_segment():
    text = dumps(ABSTAIN)
    pieces = recovery_constraint(2, 0, 2).segments_of(text)
    assert [segment.key for segment, _ in pieces] == [
        *HEAD,
        "recovery/entry/2",
        "recovery/entry/2",
        "recovery/abstention",
    ]


def test_the_entry_segment_names_only_sources_of_the_request():
    c = recovery_constraint(2, 0, 2)
    entry = c.next_segment('{"classification":"SUFFICIENT')
    assert entry is not None and entry.prefix == '","segments":[[0'
    assert re.fullmatch(entry.pattern, ',"supported",[1]]')
    assert re.fullmatch(entry.pattern, ',"partial",[1,0]]')
    assert not re.fullmatch(entry.pattern, ',"supported",[2]]')
    assert not re.fullmatch(entry.pattern, ',"supported",[01]]')
    assert not re.fullmatch(entry.pattern, ',"supported",[]]')


def test_coarse_segments_compose_to_the_same_output():
    """Recovery has no coarse head: an engine without a KV cache decodes the same segments."""
    c = recovery_constraint(3, 0, 2)
    for obj in (SUFFICIENT, ABSTAIN):
        text = dumps(obj)
        assert c.segments_of(text, coarse=True) == c.segments_of(text)


# -- exported citations name any source id in a form that reads back exactly --------------

#: (the caller's source id, the marker it is exported as), written by hand from the
#: documented escaping: ``%``, ``[``, ``]`` and non-printable characters as UTF-8 ``%XX``,
#: the empty id as a lone ``%``.
ODD_SOURCES = [
    ("", "[CITATION:%]"),
    ("Wiki [en]", "[CITATION:Wiki %5Ben%5D]"),
    ("]", "[CITATION:%5D]"),
    ('The "Times"', '[CITATION:The "Times"]'),
    ("'quoted'", "[CITATION:'quoted']"),
    ("Википедия", "[CITATION:Википедия]"),
    ("維基百科", "[CITATION:維基百科]"),
    ("ويكيبيديا", "[CITATION:ويكيبيديا]"),
    ("100% sure", "[CITATION:100%25 sure]"),
    ("%", "[CITATION:%25]"),
    ("line\nbreak", "[CITATION:line%0Abreak]"),
    ("no\u00a0break", "[CITATION:no%C2%A0break]"),
]

ONE_CITED = dumps({"classification": "SUFFICIENT", "segments": [[0, "supported", [0]]]})


def cited(response: str, sources_per_segment: list[list[str]]) -> str:
    """``response`` with its segments citing these sources, in order, as :func:`cite` writes them."""
    judged = [
        JudgedSegment(
            index=s.index,
            start=s.start,
            end=s.end,
            kind=s.kind,
            text=s.text,
            label="supported",
            sources=sources,
        )
        for s, sources in zip(segment(response), sources_per_segment, strict=True)
    ]
    return cite(response, judged)


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_a_source_id_is_exported_escaped(source, marker):
    assert parsed(ONE_CITED, "Ada wrote it.", [source]).cited_answer == f"Ada wrote it.{marker}"


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_an_exported_citation_reads_back_as_its_source(source, marker):
    assert parse_citations(parsed(ONE_CITED, "Ada wrote it.", [source]).cited_answer) == [source]


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_an_exported_citation_is_one_whole_marker(source, marker):
    assert CITATION.fullmatch(marker) is not None


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_the_cited_sources_are_the_ids_as_given(source, marker):
    assert parsed(ONE_CITED, "Ada wrote it.", [source]).cited_sources == [source]


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_an_answer_citing_an_odd_source_exports_to_the_seed_schema(source, marker):
    verdict = parsed(ONE_CITED, "Ada wrote it.", [source])
    assert verdict.classification is Classification.SUFFICIENT
    seed = verdict.to_seed()
    jsonschema.validate(seed, SEED_SCHEMA)
    assert seed["answer"] == f"Ada wrote it.{marker}"


def test_ordinary_source_ids_are_exported_unchanged():
    assert cited("A.", [["en.wikipedia.org/wiki/Ada_Lovelace"]]) == "A.[CITATION:en.wikipedia.org/wiki/Ada_Lovelace]"


def test_repeated_citations_read_back_in_order():
    exported = cited("A is one. B is two. C is three.", [["x]y"], [""], ["x]y"]])
    assert parse_citations(exported) == ["x]y", "", "x]y"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=4, unique=True))
def test_every_source_id_round_trips_through_the_export(sources):
    response = " ".join(f"Sentence {k}." for k in range(len(sources)))
    exported = cited(response, [[source] for source in sources])
    assert parse_citations(exported) == sources
    assert strip_markers(exported) == response


@pytest.mark.parametrize(
    "answer",
    [
        "A [CITATION:a[b]",  # a bracket suffice would have escaped
        "A [CITATION:50%]",  # a % that starts no escape
        "A [CITATION:%zz]",  # not hex
        "A [CITATION:%C3]",  # half of a UTF-8 character
        "A [CITATION:tab\there]",  # a control character suffice would have escaped
    ],
)
def test_a_damaged_citation_is_an_error_not_another_source(answer):
    with pytest.raises(CitationError):
        parse_citations(answer)


def test_a_citation_follows_its_segment_and_never_stands_alone():
    """A marker goes right after the segment that names the source, before the whitespace that follows it: the
    cited answer never starts with one, and no marker is separated from its claim."""
    exported = cited("  Ada wrote it.\n\nIn 1843.  ", [["a"], ["b"]])
    assert exported == "  Ada wrote it.[CITATION:a]\n\nIn 1843.[CITATION:b]  "
