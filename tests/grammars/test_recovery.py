import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.exceptions import CitationError
from suffice.gates.recovery.grammar import (
    CITATION,
    SEED_SCHEMA,
    Classification,
    RecoveryBounds,
    RecoveryOutput,
    RecoveryVerdict,
    parse_citations,
    recovery_constraint,
    relabel_citations,
)
from tests.grammars.drawing import allowed_strings
from tests.grammars.segments import assert_splits_into_segments

B = RecoveryBounds


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


SUFFICIENT = {
    "classification": "SUFFICIENT",
    "supported_claims": ["Ada wrote the notes"],
    "unsupported_claims": [],
    "answer": "Ada Lovelace wrote the notes [CITATION:1]",
}
ABSTAIN = {
    "classification": "PARTIALLY_SUFFICIENT",
    "supported_claims": ["Ada wrote the notes"],
    "unsupported_claims": ["the year 1843"],
    "abstention_notice": "The year is not in the evidence.",
    "suggested_retrieval_queries": ["Ada Lovelace notes publication year"],
}


def test_both_branches_accepted():
    c = recovery_constraint(2)
    assert c.matches(dumps(SUFFICIENT)) and c.matches(dumps(ABSTAIN))
    assert c.matches(dumps({**ABSTAIN, "classification": "INSUFFICIENT", "supported_claims": []}))


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        ({**SUFFICIENT, "answer": "Ada wrote the notes."}, "SUFFICIENT answer without a citation"),
        ({**SUFFICIENT, "answer": "Ada [CITATION:2]"}, "source 2 not in a 2-source request"),
        ({**SUFFICIENT, "answer": "Ada [CITATION:Wikipedia]"}, "citation must name a source label"),
        ({**SUFFICIENT, "answer": "Ada [x] [CITATION:0]"}, "brackets could fake a marker"),
        ({**SUFFICIENT, "unsupported_claims": ["x"]}, "SUFFICIENT with an unsupported claim"),
        ({**SUFFICIENT, "abstention_notice": "n"}, "abstention field with SUFFICIENT"),
        ({**ABSTAIN, "answer": "Ada [CITATION:0]"}, "answer when not SUFFICIENT"),
        ({k: v for k, v in ABSTAIN.items() if k != "suggested_retrieval_queries"}, "no queries"),
        ({**ABSTAIN, "suggested_retrieval_queries": []}, "empty queries"),
        ({**ABSTAIN, "unsupported_claims": []}, "abstention with nothing unsupported"),
        ({**ABSTAIN, "classification": "MAYBE"}, "unknown class"),
    ],
)
def test_conditional_fields_and_citations_by_construction(obj, why):
    assert not recovery_constraint(2).matches(dumps(obj)), why


def test_worst_case_is_exact():
    wide = "\u4e2d"
    c = recovery_constraint(12)
    sufficient = {
        "classification": "SUFFICIENT",
        "supported_claims": [wide * B.CLAIM_CHARS] * B.CLAIMS_MAX,
        "unsupported_claims": [],
        "answer": (wide * B.SENTENCE_CHARS + "[CITATION:11]") * B.ANSWER_SENTENCES,
    }
    other = {
        "classification": "PARTIALLY_SUFFICIENT",
        "supported_claims": [wide * B.CLAIM_CHARS] * B.CLAIMS_MAX,
        "unsupported_claims": [wide * B.CLAIM_CHARS] * B.CLAIMS_MAX,
        "abstention_notice": wide * B.NOTICE_CHARS,
        "suggested_retrieval_queries": [wide * B.QUERY_CHARS] * B.QUERIES_MAX,
    }
    sizes = []
    for obj in (sufficient, other):
        text = dumps(obj)
        assert c.matches(text)
        sizes.append(len(text.encode()))
    assert max(sizes) == c.max_bytes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_allowed_string_parses_and_exports_to_the_seed_schema(data):
    m = data.draw(st.integers(min_value=1, max_value=4))
    c = recovery_constraint(m)
    text = data.draw(allowed_strings(c.pattern))
    assert c.matches(text)
    out = RecoveryOutput.model_validate(json.loads(text))
    assert_splits_into_segments(c, text)
    sources = [f"doc-{i}" for i in range(m)]
    answer, cited = relabel_citations(out.answer, sources) if out.answer else (None, [])
    verdict = RecoveryVerdict(
        classification=out.classification,
        supported_claims=out.supported_claims,
        unsupported_claims=out.unsupported_claims,
        answer=answer,
        abstention_notice=out.abstention_notice,
        suggested_retrieval_queries=out.suggested_retrieval_queries,
        cited_sources=cited,
        prompt_version="recovery/v1",
    )
    jsonschema.validate(verdict.to_seed(), SEED_SCHEMA)
    assert set(cited) <= set(sources)
    assert (verdict.classification is Classification.SUFFICIENT) == bool(cited)


def test_relabel_citations():
    text, cited = relabel_citations("A [CITATION:1] B [CITATION:0] C [CITATION:1]", ["s0", "s1"])
    assert text == "A [CITATION:s1] B [CITATION:s0] C [CITATION:s1]"
    assert cited == ["s1", "s0"]


@pytest.mark.parametrize("n_sources", [1, 3, 40])
def test_the_large_segments_are_the_same_for_every_source_count(n_sources):
    c = recovery_constraint(n_sources)
    assert c.first_segment() == recovery_constraint(1).first_segment()
    text = dumps({**SUFFICIENT, "answer": "One [CITATION:0] Two [CITATION:0]"})
    keys = [segment.key for segment, _ in c.segments_of(text)]
    assert [k for k in keys if k != f"citation/{n_sources}"] == [
        "recovery/decision",
        "recovery/after-SUFFICIENT",
        "recovery/more",
        "recovery/more",
    ]


HEAD = ["recovery/decision", "recovery/after-SUFFICIENT"]


def test_only_the_decision_segment_asks_for_log_probabilities():
    pieces = recovery_constraint(2).segments_of(dumps(SUFFICIENT))
    assert [segment.key for segment, _ in pieces if segment.logprobs] == ["recovery/decision"]


@pytest.mark.parametrize(
    ("answer", "keys"),
    [
        ("One [CITATION:1]", [*HEAD, "citation/3", "recovery/more"]),
        (
            "One [CITATION:2] Two [CITATION:0]",
            [*HEAD, "citation/3", "recovery/more", "citation/3", "recovery/more"],
        ),
        (
            "A [CITATION:0] B [CITATION:1] C [CITATION:2]",
            [
                *HEAD,
                "citation/3",
                "recovery/more",
                "citation/3",
                "recovery/more",
                "citation/3",
                "recovery/close",
            ],
        ),
    ],
)
def test_an_answer_is_generated_in_segments_that_compose_to_it(answer, keys):
    c = recovery_constraint(3)
    text = dumps({**SUFFICIENT, "answer": answer})
    pieces = c.segments_of(text)
    assert [segment.key for segment, _ in pieces] == keys
    assert "".join(piece for _, piece in pieces) == text


def test_an_abstention_is_one_segment():
    text = dumps(ABSTAIN)
    pieces = recovery_constraint(2).segments_of(text)
    assert [segment.key for segment, _ in pieces] == [
        "recovery/decision",
        "recovery/after-PARTIALLY_SUFFICIENT",
    ]


def test_the_citation_segment_names_only_sources_of_the_request():
    c = recovery_constraint(2)
    cite = c.next_segment(dumps(SUFFICIENT).split("[CITATION:")[0] + "[CITATION:")
    assert cite is not None
    assert re.fullmatch(cite.pattern, "1]")
    assert not re.fullmatch(cite.pattern, "2]")
    assert not re.fullmatch(cite.pattern, "01]")


def test_coarse_segments_compose_to_the_same_output():
    c = recovery_constraint(3)
    text = dumps({**SUFFICIENT, "answer": "One [CITATION:2] Two [CITATION:0]"})
    keys = [segment.key for segment, _ in c.segments_of(text, coarse=True)]
    assert keys == ["recovery/coarse-head", "citation/3", "recovery/more", "citation/3", "recovery/more"]
    assert [segment.key for segment, _ in c.segments_of(dumps(ABSTAIN), coarse=True)] == ["recovery/coarse-head"]


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


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_a_source_id_is_exported_escaped(source, marker):
    assert relabel_citations("Ada wrote it [CITATION:0]", [source])[0] == f"Ada wrote it {marker}"


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_an_exported_citation_reads_back_as_its_source(source, marker):
    exported, _ = relabel_citations("Ada wrote it [CITATION:0]", [source])
    assert parse_citations(exported) == [source]


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_an_exported_citation_is_one_whole_marker(source, marker):
    assert CITATION.fullmatch(marker) is not None


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_the_cited_sources_are_the_ids_as_given(source, marker):
    assert relabel_citations("Ada wrote it [CITATION:0]", [source])[1] == [source]


@pytest.mark.parametrize(("source", "marker"), ODD_SOURCES)
def test_an_answer_citing_an_odd_source_exports_to_the_seed_schema(source, marker):
    answer, cited = relabel_citations("Ada wrote it [CITATION:0]", [source])
    verdict = RecoveryVerdict(
        classification=Classification.SUFFICIENT,
        supported_claims=["Ada wrote it"],
        unsupported_claims=[],
        answer=answer,
        cited_sources=cited,
        prompt_version="recovery/v1",
    )
    jsonschema.validate(verdict.to_seed(), SEED_SCHEMA)


def test_ordinary_source_ids_are_exported_unchanged():
    assert relabel_citations("A [CITATION:0]", ["en.wikipedia.org/wiki/Ada_Lovelace"])[0] == (
        "A [CITATION:en.wikipedia.org/wiki/Ada_Lovelace]"
    )


def test_repeated_citations_read_back_in_order():
    exported, _ = relabel_citations("A [CITATION:1] B [CITATION:0] C [CITATION:1]", ["", "x]y"])
    assert parse_citations(exported) == ["x]y", "", "x]y"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=4, unique=True))
def test_every_source_id_round_trips_through_the_export(sources):
    answer = " ".join(f"Sentence {k} [CITATION:{k}]" for k in range(len(sources)))
    exported, _ = relabel_citations(answer, sources)
    assert parse_citations(exported) == sources


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


def test_an_answer_is_never_only_a_citation():
    text = json.dumps(
        {"classification": "SUFFICIENT", "supported_claims": ["c"], "unsupported_claims": [], "answer": "[CITATION:0]"},
        separators=(",", ":"),
    )
    assert not recovery_constraint(1).matches(text)


def test_an_answer_may_not_start_with_a_blank():
    text = json.dumps(
        {
            "classification": "SUFFICIENT",
            "supported_claims": ["c"],
            "unsupported_claims": [],
            "answer": " [CITATION:0]",
        },
        separators=(",", ":"),
    )
    assert not recovery_constraint(1).matches(text)
