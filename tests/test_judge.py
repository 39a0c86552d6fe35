"""Harness logic on a scripted engine (generation itself is tested on vLLM)."""

import json

import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError, EngineError, PartialBatchError
from suffice.gates.recovery.gate import RecoveryGate
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from suffice.judge import Judge
from suffice.serving.base import CappedProgress, Generation, GenerationRequest, OnRecords, report_read
from tests.fakes import ScriptedEngine

GOOD = {
    "required_entities": [{"entity": "Ada", "covered": True}],
    "contradictions": [],
    "reasoning": "Chunk 0 answers.",
    "is_sufficient": True,
    "missing_information": [],
    "confidence": 0.8,
    "useful_chunk_ids": [0],
}


def good(request: GenerationRequest) -> str:
    text = json.dumps(GOOD, separators=(",", ":"))
    assert request.constraint.matches(text)
    return text


def rec(i, **kw):
    base = {"id": f"r{i}", "question": f"Question {i}?", "chunks": [{"id": 5, "text": "Ada wrote it."}]}
    base.update(kw)
    return base


def test_results_in_input_order_one_engine_call_and_bad_items_isolated():
    engine = ScriptedEngine(good)
    judge = Judge(engine, SufficiencyGate())
    records = [rec(0), {"question": "no id"}, rec(2, chunks=[]), rec(3, chunks="x"), rec(4)]
    results = judge.judge_batch(records)
    assert [r.id for r in results] == ["r0", None, "r2", "r3", "r4"]
    assert engine.calls == [2]  # both judgeable items in one batch
    assert results[1].error.field == "id" and results[3].error.field == "chunks"
    assert isinstance(results[0].verdict, SufficiencyVerdict)
    assert results[0].verdict.useful_chunk_ids == [5]  # mapped back from label 0
    empty = results[2].verdict
    assert empty.is_sufficient is False and empty.model_called is False and results[2].tokens.prompt == 0
    assert all(r.prompt_version == "sufficiency/v6" for r in results)
    assert judge.stats.verdicts == 3 and judge.stats.errors == 2


def test_invalid_output_is_retried_once_with_the_error_appended():
    seen = []

    def script(request):
        seen.append(request.messages[-1]["content"])
        return "not json" if len(seen) == 1 else good(request)

    judge = Judge(ScriptedEngine(script), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.ok and result.retries == 1
    assert "failed schema validation" in seen[1] and "failed schema validation" not in seen[0]
    assert judge.stats.retries == 1 and judge.stats.retry_failures == 0


def test_two_failures_give_an_error_that_keeps_the_raw_text():
    judge = Judge(ScriptedEngine(lambda r: '{"oops": 1}'), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.error.type == "VerdictError" and result.error.raw_text == '{"oops": 1}'
    assert judge.stats.retry_failures == 1


def test_cut_off_output_counts_and_is_retried():
    answers = iter([Generation('{"required_', "length", 10, 5)])

    def script(request):
        return next(answers, None) or good(request)

    judge = Judge(ScriptedEngine(script), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.ok and judge.stats.length_cutoffs == 1


def test_an_output_the_engine_ended_with_an_error_is_retried():
    answers = iter([Generation('{"required_entities":[{"entity":"x".",', "error", 10, 5)])

    def script(request):
        return next(answers, None) or good(request)

    judge = Judge(ScriptedEngine(script), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.ok
    assert judge.stats.retries == 1


def test_an_output_the_engine_ended_with_an_error_twice_is_that_items_error():
    engine = ScriptedEngine(lambda r: Generation('{"required_entities":[', "error", 10, 5))
    [result] = Judge(engine, SufficiencyGate()).judge_batch([rec(0)])
    assert result.error.type == "VerdictError"
    assert "finish_reason='error'" in result.error.message


def test_an_engine_failure_on_one_request_fails_only_that_item():
    engine = ScriptedEngine(good, fail_when=lambda content: "POISON" in content)
    judge = Judge(engine, SufficiencyGate())
    records = [rec(i) for i in range(5)]
    records[3]["question"] = "POISON?"
    results = judge.judge_batch(records)
    assert [r.ok for r in results] == [True, True, True, False, True]
    assert "scripted engine failure" in results[3].error.message


class FailsEachPoisonAlone(ScriptedEngine):
    """Like an engine that sends one call per request: it knows which failed, and says so."""

    def generate(self, requests, progress=None, cancel=None):
        self.calls.append(len(requests))
        outcomes = [
            EngineError("request refused")
            if "POISON" in r.messages[-1]["content"]
            else Generation(good(r), "stop", 9, 9)
            for r in requests
        ]
        if any(isinstance(o, EngineError) for o in outcomes):
            raise PartialBatchError("1 of the requests failed", outcomes)
        return outcomes


def test_a_partial_batch_keeps_each_requests_outcome_and_sends_nothing_again():
    engine = FailsEachPoisonAlone(good)
    records = [rec(i) for i in range(4)]
    records[2]["question"] = "POISON?"
    results = Judge(engine, SufficiencyGate()).judge_batch(records)
    assert [r.error.type if r.error else "verdict" for r in results] == [
        "verdict",
        "verdict",
        "GenerationError",
        "verdict",
    ]
    assert engine.calls == [4]  # nothing split, nothing sent again


def test_progress_counts_every_record_once():
    engine = ScriptedEngine(good)
    judge = Judge(engine, SufficiencyGate())
    seen: list[int] = []
    records = [rec(0), {"question": "no id"}, rec(2, chunks=[]), rec(3), rec(4)]
    judge.judge_batch(records, progress=OnRecords(seen.append))
    assert sum(seen) == len(records)
    assert len(seen) == 4  # the two without a model call at once, then each request as it completes


class ReadsPromptsThenFails(ScriptedEngine):
    """Like vLLM: each request's prompt is reported read first, then the call fails when a poisoned request is
    among them."""

    def generate(self, requests, progress=None, cancel=None):
        report_read(progress, len(requests))
        out = super().generate(requests, None, cancel)
        if progress is not None:
            for _ in requests:
                progress(1)
        return out


class Recorder:
    """A progress that keeps what it heard: records finished, and prompts read."""

    def __init__(self):
        self.done: list[int] = []
        self.prompts: list[int] = []

    def __call__(self, records):
        self.done.append(records)

    def read(self, prompts):
        self.prompts.append(prompts)

    def skipped(self, records):
        self.done.append(records)


def test_progress_never_passes_the_records_when_a_failed_batch_is_split():
    engine = ReadsPromptsThenFails(good, fail_when=lambda content: "POISON" in content)
    judge = Judge(engine, SufficiencyGate())
    records = [rec(i) for i in range(4)]
    records[1]["question"] = "POISON?"
    seen = Recorder()
    judge.judge_batch(records, progress=seen)
    running = [sum(seen.done[: k + 1]) for k in range(len(seen.done))]
    assert max(running) <= len(records)


def test_progress_adds_up_to_the_records_when_a_failed_batch_is_split():
    engine = ReadsPromptsThenFails(good, fail_when=lambda content: "POISON" in content)
    judge = Judge(engine, SufficiencyGate())
    records = [rec(i) for i in range(4)]
    records[1]["question"] = "POISON?"
    seen = Recorder()
    judge.judge_batch(records, progress=seen)
    assert sum(seen.done) == len(records)


def test_progress_hears_no_more_prompts_read_than_requests_when_a_failed_batch_is_split():
    engine = ReadsPromptsThenFails(good, fail_when=lambda content: "POISON" in content)
    records = [rec(i) for i in range(4)]
    records[1]["question"] = "POISON?"
    seen = Recorder()
    Judge(engine, SufficiencyGate()).judge_batch(records, progress=seen)
    assert sum(seen.prompts) == len(records)


def test_progress_is_called_with_whole_records_only():
    engine = ReadsPromptsThenFails(good)
    seen = Recorder()
    Judge(engine, SufficiencyGate()).judge_batch([rec(i) for i in range(3)], progress=seen)
    assert all(isinstance(n, int) for n in seen.done)


def test_capped_progress_passes_on_no_more_than_it_owes():
    seen: list[int] = []
    credit = CappedProgress(OnRecords(seen.append), 2)
    for _ in range(3):
        credit(1)
    assert seen == [1, 1]


def test_capped_progress_settles_what_is_still_owed():
    seen: list[int] = []
    credit = CappedProgress(OnRecords(seen.append), 3)
    credit(1)
    credit.settle()
    assert seen == [1, 2]


def test_capped_progress_passes_on_no_more_prompts_read_than_it_owes():
    seen = Recorder()
    credit = CappedProgress(seen, 2)
    for _ in range(3):
        credit.read(1)
    assert seen.prompts == [1, 1]


def test_a_plain_function_of_records_hears_no_prompts_read_and_skipped_records_as_done():
    seen: list[int] = []
    credit = CappedProgress(OnRecords(seen.append), 2)
    credit.read(1)
    assert seen == []
    credit.skipped(3)  # not the batch's to cap: the engine never saw them
    assert seen == [3]


class CountingFails(ScriptedEngine):
    """An engine whose token counting fails (the openai engine counts on its server)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(good)
        self.error = error

    def count_tokens(self, texts):
        raise self.error


def test_a_dead_engine_while_fitting_stops_the_batch_instead_of_blaming_records():
    from suffice.exceptions import EngineDeadError

    judge = Judge(CountingFails(EngineDeadError("the server at http://x cannot be reached")), SufficiencyGate())
    try:
        judge.judge_batch([rec(0), rec(1)])
    except EngineDeadError:
        stopped = True
    else:
        stopped = False
    assert stopped


def test_an_engine_failure_while_fitting_is_a_row_a_resume_judges_again():
    from suffice.exceptions import EngineError

    judge = Judge(CountingFails(EngineError("HTTP 500 from /tokenize")), SufficiencyGate())
    [result] = judge.judge_batch([rec(0)])
    assert result.error.type == "GenerationError"
    assert result.error.final is False


BLANK = [{"id": 0, "text": "   "}, {"id": 1, "text": "\n\t"}]


def blank_judged(gate: str):
    engine = ScriptedEngine(good)
    record = rec(0, chunks=BLANK, response="Ada wrote it.", rubric="customer-support")
    [result] = Judge(engine, config=JudgeConfig(gate=gate)).judge_batch([record])
    return engine, result


@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_chunks_that_are_all_blank_are_answered_without_the_model(gate):
    engine, _ = blank_judged(gate)
    assert engine.calls == []


@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_chunks_that_are_all_blank_are_not_positive(gate):
    _, result = blank_judged(gate)
    assert Judge(ScriptedEngine(good), config=JudgeConfig(gate=gate)).gate.is_positive(result.verdict) is False


def test_a_gate_name_that_differs_from_the_configs_gate_is_a_config_error_naming_gate():
    with pytest.raises(ConfigError) as info:
        Judge(ScriptedEngine(good), "recovery", JudgeConfig(gate="sufficiency"))
    assert info.value.parameter == "gate"


def test_a_gate_object_alone_gives_the_config_its_name():
    assert Judge(ScriptedEngine(good), RecoveryGate()).config.gate == "recovery"


class OwnGate(RecoveryGate):
    name = "strict-recovery"


def test_a_gate_of_the_users_own_with_its_own_name_is_accepted():
    assert Judge(ScriptedEngine(good), OwnGate()).gate.name == "strict-recovery"
