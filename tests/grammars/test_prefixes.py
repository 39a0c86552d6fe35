"""Segment prefixes: literal text prefilled instead of decoded, on every gate.

Why these checks: a prefix is tokens the engine appends without the mask, so it must
be exactly what the language forces there, it must not count against the segment's
decode budget, and a large pattern must not open inside a JSON string (outlines-core
did not finish compiling such a pattern within vLLM's 120 s start-up limit).
"""

import json

import pytest

from suffice.gates.adequacy.grammar import adequacy_constraint
from suffice.gates.recovery.grammar import recovery_constraint
from suffice.gates.sufficiency.grammar import sufficiency_constraint
from suffice.grammars.constraint import Constraint
from suffice.grammars.decision_verdict import decision_constraint
from tests.grammars.test_adequacy import N as ADEQUACY_CRITERIA
from tests.grammars.test_adequacy import sample as adequacy_sample
from tests.grammars.test_recovery import ABSTAIN, SUFFICIENT, dumps
from tests.grammars.test_sufficiency import output as sufficiency_output

#: Patterns this large must not follow a prefix that leaves a string open (the
#: answer's own sentence segments continue inside its string, as before prefixes).
LARGE_BYTES = 64

OUTPUTS: list[tuple[str, Constraint, str]] = [
    ("sufficient", sufficiency_constraint(3), sufficiency_output()),
    (
        "insufficient",
        sufficiency_constraint(3),
        sufficiency_output(is_sufficient=False, missing_information=["the year"], useful_chunk_ids=[]),
    ),
    ("answer", recovery_constraint(3, 0, 2), dumps(SUFFICIENT)),
    ("abstention", recovery_constraint(3, 0, 2), dumps(ABSTAIN)),
    # A window that does not start at the first segment: its first entry's prefix names its own index.
    ("later-window", recovery_constraint(3, 12, 1), dumps({**SUFFICIENT, "segments": [[12, "supported", [2]]]})),
    ("adequacy", adequacy_constraint(criteria=ADEQUACY_CRITERIA), adequacy_sample()),
    ("decision", decision_constraint("is_sufficient", ("true", "false")), '{"is_sufficient":true}'),
]


@pytest.mark.parametrize(("name", "constraint", "text"), OUTPUTS, ids=[o[0] for o in OUTPUTS])
@pytest.mark.parametrize("coarse", [False, True])
def test_a_prefix_before_a_large_pattern_ends_outside_a_string(name, constraint, text, coarse):
    done = ""
    for segment, piece in constraint.segments_of(text, coarse=coarse):
        if segment.prefix and segment.max_bytes > LARGE_BYTES:
            before = done + segment.prefix
            assert before.count('"') % 2 == 0, f"{segment.key} opens inside a string after {before[-30:]!r}"
        done += piece


@pytest.mark.parametrize(("name", "constraint", "text"), OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_the_first_segment_prefills_the_opening(name, constraint, text):
    first = constraint.first_segment()
    assert first.prefix
    assert text.startswith(first.prefix)


def test_a_prefix_is_not_in_the_decode_budget():
    head = decision_constraint("is_sufficient", ("true", "false")).first_segment()
    assert head.prefix == '{"is_sufficient'
    assert head.max_tokens == len('":false}') + 1


def test_the_decision_only_output_is_one_segment():
    c = decision_constraint("classification", ('"SUFFICIENT"', '"INSUFFICIENT"'))
    text = '{"classification":"INSUFFICIENT"}'
    pieces = c.segments_of(text)
    assert [piece for _, piece in pieces] == [text]
    assert c.next_segment(text) is None


@pytest.mark.parametrize("decision", [True, False])
def test_a_sufficiency_branch_prefills_what_its_decision_forces(decision):
    c = sufficiency_constraint(4)
    text = sufficiency_output(
        is_sufficient=decision,
        missing_information=[] if decision else ["the date"],
        useful_chunk_ids=[1],
    )
    head = text.split('"is_sufficient":', 1)[0] + '"is_sufficient":' + json.dumps(decision)
    following = c.next_segment(head)
    assert following is not None
    assert text[len(head) :].startswith(following.prefix)
    expected = ',"missing_information":[],"confidence":' if decision else ',"missing_information":'
    assert following.prefix == expected


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from suffice.serving.weights import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model(None).path), local_files_only=True)


def _boundaries(tokenizer, text: str) -> set[int]:
    """Character offsets where the tokenizer's own split of ``text`` puts a boundary."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return {end for _, end in encoded["offset_mapping"]} | {0}


#: Recovery v4's prefixes end inside one of the embedded tokenizer's tokens: an entry's ``[[0,`` / ``,[1,`` before
#: ``"supported"`` (it writes ``,"`` as one token), the close's ``]`` before ``}`` (``]}``), the abstention's
#: ``"abstention_notice":`` before its string (``":"``).  A library issue (the grammar's prefixes), reported with
#: the migration: strict, so the fix shows here.
TOKENIZED = [pytest.param(*o, id=o[0]) for o in OUTPUTS]


@pytest.mark.parametrize(("name", "constraint", "text"), TOKENIZED)
def test_a_prefix_ends_where_the_tokenizer_splits_a_verdict(tokenizer, name, constraint, text):
    """The prefix is tokenized on its own; ending at one of the tokenizer's own
    boundaries keeps the model on token sequences it has seen."""
    boundaries = _boundaries(tokenizer, text)
    done = 0
    for segment, piece in constraint.segments_of(text):
        if segment.prefix:
            end = done + len(segment.prefix)
            assert end in boundaries, f"{segment.key}: {text[:end][-12:]!r} | {text[end:][:12]!r}"
        done += len(piece)
