"""The worst case of a verdict's completion tokens (``Constraint.max_completion_tokens``), against hand-computed
cases and against the worst outputs decoded segment by segment with one byte a token (every token carries at least
one byte), and how ``reasoning_chars`` moves it."""

from __future__ import annotations

import json

import pytest

from suffice.gates.adequacy.grammar import DIMENSIONS, AdequacyBounds, adequacy_constraint
from suffice.gates.recovery.grammar import RecoveryBounds, recovery_constraint
from suffice.gates.sufficiency.grammar import IDS_KEY, SufficiencyBounds, sufficiency_constraint
from suffice.grammars.constraint import Constraint, Segment
from suffice.grammars.decision_verdict import decision_constraint
from suffice.grammars.regex import STRING_CHAR_MAX_BYTES, json_list, lit, seq
from tests.grammars.segments import decode, decoded_pieces

#: A character of the most bytes a string may hold.
WIDE = "\u4e2d"


def dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def test_one_segment_costs_its_bytes_and_an_end_of_sequence_token():
    c = Constraint.from_rx(seq(lit("{"), json_list(lit("1"), 1, 3), lit("}")), key="test/one")
    assert c.max_completion_tokens == len("{[1,1,1]}") + 1


def test_a_decision_costs_what_follows_its_prefilled_key():
    """``{"is_sufficient`` is prefilled; ``":``, ``false`` and ``}`` are decoded, then end-of-sequence."""
    c = decision_constraint("is_sufficient", ("true", "false"))
    assert c.max_completion_tokens == len('":') + len("false") + len("}") + 1


def test_a_segmented_constraint_that_declares_no_bound_has_none():
    head = Segment("a", 1, "test/a")
    c = Constraint("ab", 2, "test/ab", head=head, continuation=lambda text: None)
    assert c.max_completion_tokens is None


#: The criteria of the adequacy constraints here (the clinical rubric's four).
CRITERIA = 4


def test_the_adequacy_bound_is_its_bytes_less_the_prefilled_keys_plus_two_end_of_sequence_tokens():
    c = adequacy_constraint(criteria=CRITERIA)
    prefilled = len('{"adequacy_decision') + len('","adequacy_score":')
    assert c.max_completion_tokens == c.max_bytes - prefilled + 2


def _worst_adequacy(rationale_chars: int = AdequacyBounds.RATIONALE_CHARS) -> str:
    return dumps(
        {
            "adequacy_decision": "FAIL",
            "adequacy_score": 0.55,
            "criteria": [
                {"criterion": n, "score": 0.55, "assessment": WIDE * AdequacyBounds.CRITERION_ASSESSMENT_CHARS}
                for n in range(1, CRITERIA + 1)
            ],
            "dimensions": {
                d: {"score": 0.55, "assessment": WIDE * AdequacyBounds.ASSESSMENT_CHARS} for d in DIMENSIONS
            },
            "missing_information": [WIDE * AdequacyBounds.MISSING_CHARS] * AdequacyBounds.MISSING_MAX,
            "recommendation": "FLAG_AS_UNANSWERABLE",
            "rationale": WIDE * rationale_chars,
        }
    )


def test_the_worst_adequacy_verdict_costs_the_bound():
    c = adequacy_constraint(criteria=CRITERIA)
    _, tokens = decode(c, decoded_pieces(c, _worst_adequacy()))
    assert tokens == c.max_completion_tokens


def test_the_worst_recovery_verdict_costs_the_bound():
    """Three segments, each supported by the most sources of the longest numbers, and the abstention the model
    must write when it is not sure of them: the classification, one entry for each segment and the abstention, each a
    segment of its own (the entries' indices prefilled)."""
    b = RecoveryBounds
    c = recovery_constraint(10, 0, 3)
    entries = [[i, "supported", [9] * b.SOURCES_MAX] for i in range(3)]
    answer = {"classification": "SUFFICIENT", "segments": entries}
    abstention = {
        "classification": "PARTIALLY_SUFFICIENT",
        "segments": entries,
        "abstention_notice": WIDE * b.NOTICE_CHARS,
        "suggested_retrieval_queries": [WIDE * b.QUERY_CHARS] * b.QUERIES_MAX,
    }
    costs = [decode(c, decoded_pieces(c, dumps(obj)))[1] for obj in (answer, abstention)]
    assert max(costs) == c.max_completion_tokens


def test_the_recovery_bound_grows_with_the_segments_a_window_judges_and_the_sources_each_names():
    one, three = recovery_constraint(10, 0, 1), recovery_constraint(10, 0, 3)
    entry = three.next_segment('{"classification":"SUFFICIENT')
    assert entry is not None and entry.key == "recovery/entry/10"
    # Each entry: its comma, its label and up to three sources of "9", "]" and the end-of-sequence token.
    assert entry.max_tokens == len(',"supported",[9,9,9]]') + 1
    assert three.max_completion_tokens - one.max_completion_tokens == 2 * entry.max_tokens
    wider = recovery_constraint(10, 0, 3, RecoveryBounds(sources_max=5))
    # Two more sources of two bytes each (",9") an entry, three entries.
    assert wider.max_completion_tokens - three.max_completion_tokens == 3 * 2 * len(",9")


def _worst_sufficiency_head(bounds: SufficiencyBounds) -> str:
    """Everything before the id list of the longest insufficient verdict."""
    b = SufficiencyBounds
    text = dumps(
        {
            "required_entities": [{"entity": WIDE * b.ENTITY_CHARS, "covered": False}] * bounds.entities_max,
            "contradictions": [WIDE * b.CONTRADICTION_CHARS] * b.CONTRADICTIONS_MAX,
            "reasoning": WIDE * bounds.reasoning_chars,
            "is_sufficient": False,
            "missing_information": [WIDE * b.MISSING_CHARS] * b.MISSING_MAX,
            "confidence": 0.55,
            "useful_chunk_ids": [],
        }
    )
    return text.split(IDS_KEY)[0] + IDS_KEY


@pytest.mark.parametrize("reasoning_chars", [SufficiencyBounds.REASONING_CHARS, 40])
def test_a_sufficiency_verdict_whose_id_list_is_cut_and_continued_stays_within_the_bound(reasoning_chars):
    """The costliest path: the longest head, ``false``, the longest reason, a speculative list of eight two-digit ids
    cut back to its first, then seven ids one segment each."""
    bounds = SufficiencyBounds(reasoning_chars=reasoning_chars)
    c = sufficiency_constraint(20, bounds)
    head = decoded_pieces(c, _worst_sufficiency_head(bounds) + "]}")[:-1]
    listed = "11,10,19,18,17,16,15,14]}"
    text, tokens = decode(c, [*head, listed, ",12", ",13", ",14", ",15", ",16", ",17", ",18]}"])
    assert text.endswith(IDS_KEY + "11,12,13,14,15,16,17,18]}")
    assert tokens <= c.max_completion_tokens


def test_the_sufficiency_bound_is_the_decoded_worst_case_and_at_most_the_id_segments_end():
    """Its slack: each id segment after the cut is counted as if it closed the list (``]}``), which only the last
    one does."""
    c = sufficiency_constraint(20)
    head = decoded_pieces(c, _worst_sufficiency_head(SufficiencyBounds()) + "]}")[:-1]
    _, tokens = decode(c, [*head, "11,10,19,18,17,16,15,14]}", ",12", ",13", ",14", ",15", ",16", ",17", ",18]}"])
    assert c.max_completion_tokens == tokens + 6 * len("]}")


@pytest.mark.parametrize("n_chunks", [0, 1, 3, 20])
def test_every_sufficiency_bound_covers_its_longest_uncut_verdict(n_chunks):
    c = sufficiency_constraint(n_chunks)
    ids = list(range(n_chunks))[-SufficiencyBounds.USEFUL_MAX :] if n_chunks else []
    text = _worst_sufficiency_head(SufficiencyBounds()) + ",".join(map(str, ids)) + "]}"
    _, tokens = decode(c, decoded_pieces(c, text))
    assert tokens <= c.max_completion_tokens


def test_a_smaller_reasoning_bound_lowers_the_sufficiency_bound_by_its_bytes():
    default = sufficiency_constraint(5).max_completion_tokens
    short = sufficiency_constraint(5, SufficiencyBounds(reasoning_chars=50)).max_completion_tokens
    assert default - short == (SufficiencyBounds.REASONING_CHARS - 50) * STRING_CHAR_MAX_BYTES


def test_a_smaller_reasoning_bound_lowers_the_adequacy_bound_by_its_bytes():
    default = adequacy_constraint(criteria=CRITERIA).max_completion_tokens
    short = adequacy_constraint(rationale_chars=50, criteria=CRITERIA).max_completion_tokens
    assert default - short == (AdequacyBounds.RATIONALE_CHARS - 50) * STRING_CHAR_MAX_BYTES


def test_the_longest_adequacy_rationale_under_a_smaller_bound_decodes_within_it():
    c = adequacy_constraint(rationale_chars=50, criteria=CRITERIA)
    _, tokens = decode(c, decoded_pieces(c, _worst_adequacy(50)))
    assert tokens == c.max_completion_tokens


def test_a_rationale_over_a_smaller_bound_is_outside_the_constraint():
    assert not adequacy_constraint(rationale_chars=50, criteria=CRITERIA).matches(_worst_adequacy(51))


def test_a_reasoning_over_a_smaller_bound_is_outside_the_constraint():
    bounds = SufficiencyBounds(reasoning_chars=40)
    text = _worst_sufficiency_head(SufficiencyBounds(reasoning_chars=41)) + "]}"
    assert not sufficiency_constraint(3, bounds).matches(text)


def test_the_reasoning_bound_names_its_compiled_forms():
    c = sufficiency_constraint(3, SufficiencyBounds(reasoning_chars=40))
    assert (c.key, c.first_segment().key) == ("sufficiency/3/r40", "sufficiency/head/r40")


def test_the_rationale_bound_names_its_compiled_forms():
    assert adequacy_constraint(rationale_chars=40, criteria=CRITERIA).key == "adequacy/c4/r40"
