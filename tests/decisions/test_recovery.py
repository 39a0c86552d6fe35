"""Routing from fixed verdicts, against expectations computed by hand."""

import pytest

from suffice.exceptions import ConfigError
from suffice.gates.recovery.citing import cite
from suffice.gates.recovery.decision import QUESTION_CUT_GAP, SufficiencyThreshold, decide
from suffice.gates.recovery.grammar import Classification, JudgedSegment, RecoveryVerdict
from suffice.prompts.fitting import ShownChunk

SHOWN = [
    ShownChunk(0, 10, "a", "docA", False, 0.9),
    ShownChunk(1, 11, "b", "docA", False, 0.4),
    ShownChunk(2, 12, "c", "docB", False, 0.3),
    ShownChunk(3, 13, "d", None, False, None),
]


def verdict(cls, supported=("c1",), unsupported=(), cited=(), queries=None, windows=1, partial=()):
    """A verdict whose segments are the claims (supported, partial, then unsupported), each its own sentence of the
    response; the supported and partial ones cite ``cited``."""
    sufficient = cls is Classification.SUFFICIENT
    segments, at = [], 0
    for index, (text, label) in enumerate(
        [(c, "supported") for c in supported]
        + [(c, "partial") for c in partial]
        + [(c, "unsupported") for c in unsupported]
    ):
        sources = list(cited) if label != "unsupported" else []
        segments.append(
            JudgedSegment(
                index=index, start=at, end=at + len(text), kind="sentence", text=text, label=label, sources=sources
            )
        )
        at += len(text) + 1
    response = " ".join(s.text for s in segments)
    return RecoveryVerdict(
        classification=cls,
        model_classification=cls,
        segments=segments,
        supported_claims=list(supported),
        unsupported_claims=[*partial, *unsupported],
        cited_answer=cite(response, segments),
        abstention_notice=None if sufficient else "gap",
        suggested_retrieval_queries=None if sufficient else list(queries or ["q1"]),
        cited_sources=list(cited),
        prompt_version="recovery/v4",
        windows=windows,
    )


def test_sufficient_meeting_threshold_delivers_with_hand_computed_evidence():
    t = SufficiencyThreshold(min_passages=2, min_cumulative_score=1.2, required_support_ratio=1.0)
    d = decide(verdict(Classification.SUFFICIENT, cited=["docA", "docB"]), SHOWN, t)
    assert d.route == "deliver"
    assert d.supporting_passages == 2  # docA (two chunks) and docB: two sources
    assert d.cumulative_score == pytest.approx(1.6)  # 0.9 + 0.4 + 0.3
    assert d.support_ratio == 1.0


def test_one_document_in_two_chunks_is_one_supporting_passage_unless_chunks_are_counted():
    # The seed's supporting passages are sources: docA cut into two chunks does not meet min_passages=2.
    by_source = decide(verdict(Classification.SUFFICIENT, cited=["docA"]), SHOWN, SufficiencyThreshold.strict())
    assert (by_source.route, by_source.supporting_passages) == ("retrieve_more", 1)
    by_chunk = SufficiencyThreshold(count="chunks")
    d = decide(verdict(Classification.SUFFICIENT, cited=["docA"]), SHOWN, by_chunk)
    assert (d.route, d.supporting_passages) == ("deliver", 2)
    assert SufficiencyThreshold.from_spec("count=chunks").count == "chunks"
    assert "(distinct sources)" in SufficiencyThreshold().describe()


def test_the_default_threshold_is_strict_from_every_construction_path():
    from suffice.gates.recovery.gate import RecoveryGate, RecoveryOptions

    strict = SufficiencyThreshold.strict()
    assert SufficiencyThreshold.from_spec({}) == strict == SufficiencyThreshold.from_spec("strict")
    assert RecoveryGate().threshold == strict == RecoveryGate.from_options(RecoveryOptions()).threshold


def test_sufficient_below_threshold_retrieves_then_abstains_or_escalates():
    t = SufficiencyThreshold(min_passages=3)
    v = verdict(Classification.SUFFICIENT, supported=["c1", "c2"], cited=["docB"])
    d = decide(v, SHOWN, t)
    assert d.route == "retrieve_more" and d.queries == ["c1", "c2"]
    assert d.gap == ["1 supporting passage(s), threshold 3"]
    assert decide(v, SHOWN, t, can_retrieve=False).route == "abstain"
    strict = SufficiencyThreshold(min_passages=3, high_stakes=True)
    # No retrieval left under high stakes: a person sees the gap and the queries (issue 37).
    escalated = decide(v, SHOWN, strict, can_retrieve=False)
    assert (escalated.route, escalated.rule) == ("human_review", "abstained_high_stakes")
    assert escalated.queries == ["c1", "c2"]


def test_a_source_without_name_is_cited_by_chunk_id():
    d = decide(verdict(Classification.SUFFICIENT, cited=["13"]), SHOWN, SufficiencyThreshold())
    assert d.supporting_passages == 1 and d.cumulative_score == 0.0 and d.route == "deliver"


def test_partial_support():
    v = verdict(Classification.PARTIALLY_SUFFICIENT, supported=["a", "b"], unsupported=["c"], queries=["q"])
    assert decide(v, SHOWN, SufficiencyThreshold.strict()).route == "human_review"
    loose = decide(v, SHOWN, SufficiencyThreshold.loose())
    assert loose.route == "deliver" and loose.support_ratio == pytest.approx(2 / 3)
    d = decide(v, SHOWN, SufficiencyThreshold())
    assert d.route == "retrieve_more" and d.queries == ["q"] and d.gap == ["c"]
    assert decide(v, SHOWN, SufficiencyThreshold(), can_retrieve=False).route == "abstain"


def test_insufficient():
    v = verdict(Classification.INSUFFICIENT, supported=[], unsupported=["x", "y"], queries=["q1", "q2"])
    d = decide(v, SHOWN, SufficiencyThreshold.loose())
    assert d.route == "retrieve_more" and d.queries == ["q1", "q2"] and d.support_ratio == 0.0
    final = decide(v, SHOWN, SufficiencyThreshold.loose(), can_retrieve=False)
    assert final.route == "abstain" and final.gap == ["x", "y"] and final.queries == ["q1", "q2"]


def test_same_inputs_same_decision():
    v = verdict(Classification.PARTIALLY_SUFFICIENT, supported=["a"], unsupported=["b"])
    assert decide(v, SHOWN, SufficiencyThreshold.loose()) == decide(v, SHOWN, SufficiencyThreshold.loose())


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"min_passages": -1}, "min_passages"),
        ({"required_support_ratio": 1.5}, "required_support_ratio"),
        ({"min_cumulative_score": float("nan")}, "min_cumulative_score"),
    ],
)
def test_threshold_errors_name_the_parameter(kwargs, parameter):
    with pytest.raises(ConfigError) as info:
        SufficiencyThreshold(**kwargs)
    assert info.value.parameter == parameter
    with pytest.raises(ConfigError, match="threshold"):
        SufficiencyThreshold.preset("medium")


def test_loose_partial_delivery_carries_the_unsupported_claims_then_the_notice_as_caveats():
    v = verdict(Classification.PARTIALLY_SUFFICIENT, supported=["a", "b"], unsupported=["c"], queries=["q"])
    assert decide(v, SHOWN, SufficiencyThreshold.loose()).caveats == ["c", "gap"]


CUT = {"question_truncated": True}


@pytest.mark.parametrize(
    ("cls", "threshold"),
    [
        (Classification.SUFFICIENT, SufficiencyThreshold()),
        (Classification.PARTIALLY_SUFFICIENT, SufficiencyThreshold.loose()),
    ],
)
def test_a_question_checked_only_in_part_is_never_delivered(cls, threshold):
    # v4 judges every segment of any response (in windows), so the question is the one input a verdict can have
    # checked only in part: what would deliver goes to a person, with nothing to deliver.
    v = verdict(
        cls, supported=["a", "b"], unsupported=[] if cls is Classification.SUFFICIENT else ["c"], cited=["docA"]
    )
    assert decide(v, SHOWN, threshold).route == "deliver"  # the same verdict on a whole question delivers
    d = decide(v.model_copy(update=CUT), SHOWN, threshold)
    assert d.route == "human_review"
    assert d.rule == "question_not_fully_checked"
    assert d.reason.startswith("the question was cut to fit max_question_tokens")
    assert d.gap == [QUESTION_CUT_GAP]
    assert d.caveats == [] and d.queries == []


def test_a_question_checked_only_in_part_routes_as_before_when_it_would_not_deliver():
    v = verdict(Classification.INSUFFICIENT, supported=[], unsupported=["x"], queries=["q"])
    assert decide(v.model_copy(update=CUT), SHOWN, SufficiencyThreshold()).route == "retrieve_more"
    assert decide(v.model_copy(update=CUT), SHOWN, SufficiencyThreshold(), can_retrieve=False).route == "abstain"


@pytest.mark.parametrize(
    ("cls", "threshold"),
    [
        (Classification.SUFFICIENT, SufficiencyThreshold()),
        (Classification.PARTIALLY_SUFFICIENT, SufficiencyThreshold.loose()),
    ],
)
def test_a_response_judged_in_many_windows_is_decided_as_one_judged_in_one(cls, threshold):
    # What replaced response_not_fully_checked (v3): a long response is judged whole, in windows, and its length
    # never sends it to a person.
    v = verdict(
        cls, supported=["a", "b"], unsupported=[] if cls is Classification.SUFFICIENT else ["c"], cited=["docA"]
    )
    long = v.model_copy(update={"windows": 12})
    assert not long.response_truncated
    assert decide(long, SHOWN, threshold) == decide(v, SHOWN, threshold)
    assert decide(long, SHOWN, threshold).route == "deliver"


def test_strict_partial_has_no_caveats():
    v = verdict(Classification.PARTIALLY_SUFFICIENT, supported=["a", "b"], unsupported=["c"], queries=["q"])
    assert decide(v, SHOWN, SufficiencyThreshold.strict()).caveats == []


def test_a_partial_verdict_sent_to_retrieval_has_no_caveats():
    # One claim supported, one partly, one not: PARTIALLY_SUFFICIENT (the tally), support ratio 1/3 < 0.5.
    v = verdict(Classification.PARTIALLY_SUFFICIENT, supported=["a"], partial=["b"], unsupported=["c"], cited=["docB"])
    d = decide(v, SHOWN, SufficiencyThreshold.loose())
    assert d.route == "retrieve_more"
    assert d.caveats == []


def test_a_sufficient_delivery_has_no_caveats():
    d = decide(verdict(Classification.SUFFICIENT, cited=["docA"]), SHOWN, SufficiencyThreshold.loose())
    assert d.caveats == []


NEGATIVE = [ShownChunk(0, 10, "a", "docA", False, -2.1), ShownChunk(1, 11, "b", "docB", False, -1.3)]


@pytest.mark.parametrize(
    "threshold", [SufficiencyThreshold(), SufficiencyThreshold.strict(), SufficiencyThreshold.loose()]
)
def test_negative_scores_from_a_cross_encoder_deliver_under_the_default_and_the_presets(threshold):
    d = decide(verdict(Classification.SUFFICIENT, cited=["docA", "docB"]), NEGATIVE, threshold)
    assert d.route == "deliver"


def test_a_negative_minimum_is_a_minimum_in_the_retrievers_units():
    t = SufficiencyThreshold(min_cumulative_score=-3.0)
    d = decide(verdict(Classification.SUFFICIENT, cited=["docA", "docB"]), NEGATIVE, t)
    assert d.route == "retrieve_more"
    assert d.gap == ["cumulative score -3.4, threshold -3"]


def test_without_a_minimum_the_threshold_says_nothing_of_scores():
    assert "score" not in SufficiencyThreshold().describe()
