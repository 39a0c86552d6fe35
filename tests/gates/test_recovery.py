"""The recovery gate on the scripted engine: every segment of the response judged, what a decision delivers, and
in what form.

The engine is scripted (it proves the gate's handling of a verdict, not the model's judgement); the real engine's
verdicts are checked in test_recovery_engine.py.
"""

from __future__ import annotations

import json

import pytest

from suffice.exceptions import ConfigError
from suffice.formats.verdicts import export
from suffice.gates.recovery.citing import strip_markers
from suffice.gates.recovery.decision import SufficiencyThreshold, decide
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.recovery.grammar import (
    Classification,
    RecoveryVerdict,
    parse_citations,
    recovery_constraint,
)
from suffice.gates.recovery.segments import segment
from suffice.judge import Judge
from suffice.prompts.windows import SEGMENT_FENCE_TOKENS
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine, prompt_segments, recovery_reply

RESPONSE = "Ada Lovelace wrote the notes. She wrote them in 1843."


def record(source: str = "ada.txt", response: str = RESPONSE) -> dict[str, object]:
    return {
        "id": "ada",
        "question": "Who wrote the notes, and when?",
        "response": response,
        "chunks": [{"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": source}],
    }


def year_unsupported(index: int, text: str) -> str:
    return "unsupported" if "1843" in text else "supported"


def judged(
    label=year_unsupported,
    threshold: object = "loose",
    rec: dict[str, object] | None = None,
    classification: str | None = None,
    **options: object,
) -> RecoveryVerdict:
    gate = RecoveryGate.from_options(RecoveryGate.options_model.parse("recovery", {"threshold": threshold, **options}))
    engine = ScriptedEngine(
        lambda request: recovery_reply(request, label, classification, "No passage gives the year.")
    )
    verdict = Judge(engine, gate).judge_batch([rec or record()])[0].verdict
    assert isinstance(verdict, RecoveryVerdict), verdict
    return verdict


# -- every segment judged, the classification computed ---------------------------------------------------------


def test_every_segment_of_the_response_gets_its_label_and_its_exact_text_and_offsets():
    verdict = judged()
    assert [(s.index, s.start, s.end, s.label) for s in verdict.segments] == [
        (0, 0, 29, "supported"),
        (1, 30, 53, "unsupported"),
    ]
    assert [RESPONSE[s.start : s.end] for s in verdict.segments] == [s.text for s in verdict.segments]
    assert verdict.supported_claims == ["Ada Lovelace wrote the notes."]
    assert verdict.unsupported_claims == ["She wrote them in 1843."]
    assert verdict.segments[0].sources == ["ada.txt"] and verdict.segments[1].sources == []


def test_an_invented_sentence_beside_a_supported_one_is_not_sufficient():
    # Issue 49: v3 asked for the claims the question needs, so extra invented sentences went unchecked.
    verdict = judged(classification="SUFFICIENT")
    assert verdict.model_classification is Classification.SUFFICIENT
    assert verdict.classification is Classification.PARTIALLY_SUFFICIENT and verdict.disagreement


def test_all_supported_labels_the_model_did_not_call_sufficient_settle_partial():
    # The seed: "if you are unsure about support for any claim, classify as PARTIALLY_SUFFICIENT".
    verdict = judged("supported", classification="INSUFFICIENT")
    assert verdict.classification is Classification.PARTIALLY_SUFFICIENT and verdict.disagreement
    assert verdict.abstention_notice == "No passage gives the year."


def test_most_claims_unsupported_is_insufficient_whatever_the_model_says():
    rec = record(response="A is true. B is true. C is true.")
    verdict = judged(
        lambda i, t: "supported" if t.startswith("A") else "unsupported", rec=rec, classification="SUFFICIENT"
    )
    assert verdict.classification is Classification.INSUFFICIENT


def test_a_response_with_no_claim_is_insufficient():
    verdict = judged("no_claim", rec=record(response="Hello! Thanks for asking."))
    assert verdict.classification is Classification.INSUFFICIENT
    assert verdict.decision is not None and verdict.decision.route != "deliver"


def test_a_response_with_nothing_to_judge_is_an_error_naming_the_response():
    engine = ScriptedEngine(lambda request: pytest.fail("the model is not asked"))
    [result] = Judge(engine, RecoveryGate()).judge_batch([record(response="```\n```\n---")])
    assert result.error is not None and result.error.field == "response"


# -- what is delivered ----------------------------------------------------------------------------------------


def test_a_sufficient_verdict_delivers_the_response_byte_for_byte_with_inline_citations():
    response = "Ada  Lovelace wrote them.\n\n  See *the notes* — 1843 [ref 1]. "
    verdict = judged("supported", rec=record(response=response))
    routing = RecoveryGate(SufficiencyThreshold.loose()).route(verdict)
    assert routing.route == "deliver" and routing.citations == ["ada.txt"]
    assert (
        routing.answer
        == "Ada  Lovelace wrote them.[CITATION:ada.txt]\n\n  See *the notes* — 1843 [ref 1].[CITATION:ada.txt] "
    )
    assert strip_markers(routing.answer) == response
    assert verdict.to_seed()["answer"] == routing.answer


def test_a_loose_partial_delivery_marks_each_unsupported_segment_in_the_text():
    verdict = judged()
    assert verdict.decision is not None and verdict.decision.route == "deliver"
    assert (
        verdict.delivered_answer
        == "Ada Lovelace wrote the notes.[CITATION:ada.txt] She wrote them in 1843.[UNSUPPORTED]"
    )
    assert verdict.decision.caveats == ["She wrote them in 1843.", "No passage gives the year."]
    # The cited answer (every route) marks nothing: the marker belongs to a partial delivery.
    assert verdict.cited_answer == "Ada Lovelace wrote the notes.[CITATION:ada.txt] She wrote them in 1843."
    assert "answer" not in verdict.to_seed()


def test_the_unsupported_marker_is_an_option():
    verdict = judged(unsupported_marker=" (unverified)")
    assert verdict.delivered_answer is not None and verdict.delivered_answer.endswith("1843. (unverified)")
    assert strip_markers(verdict.delivered_answer, " (unverified)") == RESPONSE


@pytest.mark.parametrize("marker", ["", "   ", "[CITATION:x]", "two\nlines", "x" * 65])
def test_an_unusable_unsupported_marker_is_refused_naming_the_option(marker):
    with pytest.raises(ConfigError, match="unsupported_marker"):
        RecoveryGate.options_model.parse("recovery", {"unsupported_marker": marker})


def test_a_strict_partial_verdict_goes_to_a_person_and_delivers_nothing():
    verdict = judged(threshold="strict")
    assert verdict.decision is not None
    assert (verdict.decision.route, verdict.decision.rule) == ("human_review", "partial_under_high_stakes")
    assert verdict.delivered_answer is None and verdict.answer is None


def test_the_gate_exports_an_odd_source_id_escaped_and_it_reads_back():
    verdict = judged("supported", rec=record(source="Wiki [en]"))
    answer = verdict.to_seed()["answer"]
    assert "[CITATION:Wiki %5Ben%5D]" in answer
    assert parse_citations(answer) == ["Wiki [en]", "Wiki [en]"]
    assert verdict.decision is not None and verdict.decision.supporting_passages == 1


def test_a_delivered_partial_answer_counts_as_positive_and_calibration_counts_the_route():
    strict, loose = SufficiencyThreshold.strict(), SufficiencyThreshold.loose()
    below = judged("supported", threshold="strict")  # SUFFICIENT, one source of two: retrieve_more
    partial = judged()  # PARTIALLY_SUFFICIENT delivered with caveats
    assert RecoveryGate(strict).is_positive(below) is False and RecoveryGate(loose).is_positive(partial) is True
    for verdict, threshold in ((below, strict), (partial, loose)):
        gate = RecoveryGate(threshold)
        scores = gate.calibration_scores(verdict.model_dump(mode="json"))
        assert scores["decision"] == float(gate.is_positive(verdict))


# -- decisions ------------------------------------------------------------------------------------------------


def test_insufficient_with_no_retrieval_left_abstains_with_the_gap_and_queries():
    verdict = judged("unsupported")
    decision = decide(verdict, [], SufficiencyThreshold.loose(), can_retrieve=False)
    assert (decision.route, decision.rule) == ("abstain", None)
    assert decision.gap == [s.text for s in segment(RESPONSE)]
    assert decision.queries == ["more evidence"]


def test_a_high_stakes_abstention_goes_to_a_person_with_the_gap_and_queries():
    # The seed: "Add a human review gate when the system abstains on high-stakes queries".
    verdict = judged("unsupported")
    decision = decide(verdict, [], SufficiencyThreshold.strict(), can_retrieve=False)
    assert (decision.route, decision.rule) == ("human_review", "abstained_high_stakes")
    assert decision.queries == ["more evidence"]
    assert decide(verdict, [], SufficiencyThreshold.strict()).route == "retrieve_more"


def test_explicit_threshold_values_fill_the_rest_from_strict():
    threshold = SufficiencyThreshold.from_spec("min_passages=1,min_cumulative_score=1.5,required_support_ratio=0.8")
    strict = SufficiencyThreshold.strict()
    assert (threshold.min_passages, threshold.min_cumulative_score, threshold.required_support_ratio) == (1, 1.5, 0.8)
    assert threshold.high_stakes is strict.high_stakes and threshold.accept_partial is strict.accept_partial
    assert SufficiencyThreshold.from_spec({"min_passages": 1, "min_passage_score": 0.3}) == SufficiencyThreshold(
        min_passages=1, required_support_ratio=1.0, high_stakes=True, min_passage_score=0.3
    )


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ("min_passages=two", "min_passages"),
        ("min_passages=-1", "min_passages"),
        ("required_support_ratio=1.5", "required_support_ratio"),
        ("min_passage_score=high", "min_passage_score"),
        ("min_pasages=2", "min_pasages"),
        ("high_stakes=maybe", "high_stakes"),
        ({"min_cumulative_score": "x"}, "min_cumulative_score"),
    ],
)
def test_a_bad_threshold_value_is_refused_naming_the_key(spec, key):
    with pytest.raises(ConfigError, match=key):
        RecoveryGate.options_model.parse("recovery", {"threshold": spec})


def scored_record(score: float) -> dict[str, object]:
    chunk = {"id": 0, "text": "Ada Lovelace wrote the notes on the Analytical Engine.", "source": "ada.txt"}
    return {**record(), "chunks": [{**chunk, "score": score}]}


def test_a_cited_passage_under_the_per_passage_floor_does_not_count():
    spec = {"min_passages": 1, "min_passage_score": 0.5}
    weak = judged("supported", spec, scored_record(0.2)).decision
    strong = judged("supported", spec, scored_record(0.9)).decision
    assert weak is not None and strong is not None
    assert weak.route == "retrieve_more" and weak.supporting_passages == 0
    assert "0.5" in weak.reason
    assert strong.route == "deliver" and strong.supporting_passages == 1


def test_the_seed_export_writes_the_seed_harness_names_and_every_segment_beside():
    delivered = judged("supported").to_seed()
    assert delivered["sufficiency_verdict"] == "SUFFICIENT" and delivered["retrieval_queries"] == []
    more = judged("unsupported")
    seed = more.to_seed()
    assert seed["sufficiency_verdict"] == "INSUFFICIENT" and seed["retrieval_queries"] == ["more evidence"]
    assert "She wrote them in 1843." in seed["gap_description"]
    row = export(RecoveryGate(SufficiencyThreshold.loose()), more, "seed")
    assert {"sufficiency_verdict", "gap_description", "retrieval_queries"} <= set(row["verdict"])
    assert [s["label"] for s in row["segments"]] == ["unsupported", "unsupported"]
    assert row["model_classification"] == "INSUFFICIENT" and row["fitting"]["windows"] == 1


# -- the constraint -------------------------------------------------------------------------------------------

OK = '{"classification":"SUFFICIENT","segments":[[4,"supported",[0]],[5,"no_claim",[]]]}'


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"classification":"SUFFICIENT","segments":[[4,"supported",[0]]]}', "skips a segment"),
        ('{"classification":"SUFFICIENT","segments":[[4,"supported",[0]],[4,"no_claim",[]]]}', "repeats one"),
        ('{"classification":"SUFFICIENT","segments":[[5,"no_claim",[]],[4,"supported",[0]]]}', "reorders"),
        (
            '{"classification":"SUFFICIENT","segments":[[4,"supported",[0]],[5,"no_claim",[]],[6,"no_claim",[]]]}',
            "invents one",
        ),
        (
            '{"classification":"SUFFICIENT","segments":[[4,"supported",[2]],[5,"no_claim",[]]]}',
            "cites a source not shown",
        ),
        ('{"classification":"SUFFICIENT","segments":[[4,"supported",[]],[5,"no_claim",[]]]}', "supports from nothing"),
        (
            '{"classification":"SUFFICIENT","segments":[[4,"unsupported",[0]],[5,"no_claim",[]]]}',
            "cites for no support",
        ),
        (
            '{"classification":"SUFFICIENT","segments":[[4,"supported",[0,1,0,1]],[5,"no_claim",[]]]}',
            "names more sources than the bound",
        ),
        (
            '{"classification":"SUFFICIENT","segments":[[4,"supported",[0]],[5,"no_claim",[]]],'
            '"abstention_notice":"x","suggested_retrieval_queries":["q"]}',
            "abstains when every claim is supported",
        ),
        ('{"classification":"SUFFICIENT","segments":[[4,"unsupported",[]],[5,"no_claim",[]]]}', "omits the abstention"),
        ('{"classification":"PARTIALLY_SUFFICIENT","segments":[[4,"supported",[0]],[5,"no_claim",[]]]}', "unsure"),
    ],
)
def test_the_constraint_refuses_an_output_that_breaks_the_segment_rules(text, why):
    constraint = recovery_constraint(2, 4, 2)
    assert constraint.matches(OK)
    assert not constraint.matches(text), why


def test_the_constraint_decodes_in_segments_that_compose_to_the_whole_output():
    constraint = recovery_constraint(2, 4, 2)
    pieces = constraint.segments_of(OK)
    assert [segment.key for segment, _ in pieces] == [
        "recovery/decision",
        "recovery/entry/2",
        "recovery/entry/2",
        "recovery/close",
    ]
    assert "".join(piece for _, piece in pieces) == OK
    # One compiled form for every entry, its index prefilled: the model writes neither the index nor the comma.
    assert pieces[1][0].prefix == '","segments":[[4' and pieces[2][0].prefix == ",[5"
    assert constraint.max_completion_tokens is not None and constraint.max_completion_tokens < constraint.max_tokens


# -- any length: windows ---------------------------------------------------------------------------------------

#: About 3,000 words in 300 sentences.
LONG = " ".join(f"Sentence {i} says that item {i} weighs {i % 7} kilograms and costs {i} euros." for i in range(300))


def test_a_3000_word_response_is_judged_whole_in_windows_each_segment_once():
    prompts: list[str] = []

    def script(request):
        prompts.append(request.messages[-1]["content"])
        return recovery_reply(request, lambda i, t: "unsupported" if i == 250 else "supported")

    engine = ScriptedEngine(script, max_model_len=8192)
    judge = Judge(engine, RecoveryGate(SufficiencyThreshold.loose()))
    [result] = judge.judge_batch([record(response=LONG)])
    verdict = result.verdict
    assert isinstance(verdict, RecoveryVerdict) and len(LONG.split()) > 3000
    assert [s.index for s in verdict.segments] == list(range(300))
    assert verdict.windows == len(prompts) > 1
    seen = [i for p in prompts for i, _ in prompt_segments_of(p)]
    assert seen == list(range(300))  # each segment in exactly one window, in order
    # The windows share their context: the same words before the segments, so the prefix cache holds it once.
    context = prompts[0].split("Generated answer, segments")[0]
    assert all(p.startswith(context) for p in prompts)
    # The window's segments fit max_response_tokens (whitespace tokens here), with their fence lines.
    for p in prompts:
        texts = [t for _, t in prompt_segments_of(p)]
        assert sum(len(t.split()) + SEGMENT_FENCE_TOKENS for t in texts) <= judge.config.max_response_tokens
    assert verdict.unsupported_claims == [
        f"Sentence 250 says that item 250 weighs {250 % 7} kilograms and costs 250 euros."
    ]
    assert not verdict.response_truncated and verdict.decision is not None and verdict.decision.route == "deliver"
    assert (
        result.tokens.prompt > 0 and result.raw_text is not None and result.raw_text.count("\n") == verdict.windows - 1
    )


def prompt_segments_of(prompt: str) -> list[tuple[int, str]]:
    return prompt_segments(GenerationRequest(({"role": "user", "content": prompt},), recovery_constraint(1, 0, 1)))


def test_a_retry_notes_the_error_in_every_window():
    calls: list[list[str]] = []

    def script(request):
        calls.append([request.messages[-1]["content"]])
        if len(calls) <= 2:
            return '{"classification":"SUFFICIENT"'  # cut short: not a verdict
        return recovery_reply(request, "supported")

    judge = Judge(ScriptedEngine(script, max_model_len=8192), RecoveryGate(SufficiencyThreshold.loose()))
    config_windows = record(response=" ".join(f"Claim {i} holds." for i in range(60)))
    [result] = judge.judge_batch([config_windows])
    assert result.verdict is not None and result.retries == 1
    windows = result.verdict.windows
    assert windows > 1 and len(calls) == 2 * windows
    assert all("failed schema validation" in c[0] for c in calls[windows:])
    assert not any("failed schema validation" in c[0] for c in calls[:windows])


def test_the_cited_answer_round_trips_for_any_response(tmp_path):
    for response in (
        "Plain.",
        "Two. Sentences.",
        "- a list\n- of items",
        "| a | b |\n|---|---|\n| 1 | 2 |",
        "日本。中国。",
    ):
        verdict = judged("supported", rec=record(response=response))
        assert strip_markers(verdict.cited_answer) == response
        assert json.loads(json.dumps(verdict.model_dump(mode="json")))["cited_answer"] == verdict.cited_answer


def test_the_docs_state_the_worst_case_a_recovery_window_has():
    from pathlib import Path

    from suffice.gates.recovery.grammar import RecoveryBounds

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "judge.md").read_text(encoding="utf-8").split())
    widest = recovery_constraint(1, 0, RecoveryBounds.WINDOW_SEGMENTS).max_tokens
    one = recovery_constraint(1, 0, 1).max_tokens
    stated = f"{widest:,} (recovery, a window of {RecoveryBounds.WINDOW_SEGMENTS} segments; {one:,} for one)"
    assert stated in text


def test_the_response_s_own_citation_markers_are_never_delivered_as_checked():
    # A generator's [CITATION:...] text (unchecked, or damaged) is left out: only citations the model named for a
    # segment among the sources shown go out.
    response = "Ada wrote the notes [CITATION:evil]. It was 100% [CITATION:50%] true."
    verdict = judged("supported", rec=record(response=response))
    assert verdict.delivered_answer == "Ada wrote the notes .[CITATION:ada.txt] It was 100%  true.[CITATION:ada.txt]"
    assert parse_citations(verdict.delivered_answer) == ["ada.txt", "ada.txt"]
    assert strip_markers(verdict.cited_answer) == strip_markers(response)


def test_windows_are_sized_from_the_model_s_context_and_the_constraint_s_worst_case():
    """A window's segments and its output's worst case take at most half of what the instructions leave: a smaller
    context gives more, smaller windows, and every one of them fits with the evidence."""
    from suffice.prompts.fitting import RETRY_RESERVE
    from suffice.records.item import parse_record

    counts = {}
    for max_model_len in (3072, 4096, 8192):
        engine = ScriptedEngine(lambda request: recovery_reply(request, "supported"), max_model_len=max_model_len)
        judge = Judge(engine, RecoveryGate(SufficiencyThreshold.loose()))
        windows = judge._fit(parse_record(record(response=LONG), need_response=True)).prompts
        for messages, constraint in windows:
            assert engine.prompt_tokens(messages) + constraint.max_tokens + RETRY_RESERVE <= max_model_len
            shown = prompt_segments_of(messages[-1]["content"])
            tokens = sum(len(t.split()) + SEGMENT_FENCE_TOKENS for _, t in shown)
            assert len(shown) == 1 or tokens + constraint.max_tokens <= (max_model_len - RETRY_RESERVE) // 2
        counts[max_model_len] = len(windows)
    assert counts[3072] > counts[4096] > counts[8192] > 1


def test_the_docs_state_the_recovery_output_bound_the_code_has():
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "gates.md").read_text(encoding="utf-8").split())
    one = recovery_constraint(3, 0, 1).max_completion_tokens
    more = recovery_constraint(3, 0, 2).max_completion_tokens - one
    widest = recovery_constraint(3, 0, 32).max_completion_tokens
    assert f"recovery {one:,} for a window of one segment and {more} for each segment more ({widest:,} for 32)" in text


def test_passages_per_claim_a_supported_segment_backed_by_too_few_sources_does_not_count():
    two = {"min_passages": 1, "min_sources_per_claim": 2}
    rec = {
        **record(),
        "chunks": [*record()["chunks"], {"id": 1, "text": "The notes date from 1843.", "source": "y.txt"}],
    }
    thin = judged("supported", two, rec)  # every segment cites source 0 alone
    both = judged(lambda i, t: ("supported", [0, 1]), two, rec)
    assert thin.decision is not None and both.decision is not None
    assert thin.decision.support_ratio == 0.0 and thin.decision.route == "retrieve_more"
    assert "support ratio 0.00" in thin.decision.reason
    assert both.decision.support_ratio == 1.0 and both.decision.route == "deliver"
    assert "each by at least 2 sources" in SufficiencyThreshold.from_spec(two).describe()
    with pytest.raises(ConfigError, match="min_sources_per_claim"):
        SufficiencyThreshold.from_spec("min_sources_per_claim=0")
