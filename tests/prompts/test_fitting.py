import pytest

from suffice.config import JudgeConfig
from suffice.exceptions import PromptTooLongError
from suffice.gates.sufficiency.gate import SufficiencyGate
from suffice.prompts.fitting import CHARS_PER_TOKEN_MAX, TRUNCATION_MARK, fit_prompt, water_level
from suffice.records.item import parse_record
from tests.fakes import ScriptedEngine


def fit(record, max_model_len, **config):
    gate = SufficiencyGate()
    engine = ScriptedEngine(lambda r: "", max_model_len=max_model_len)
    item = parse_record(record)
    fitted = fit_prompt(
        engine, gate.template, item, JudgeConfig(**config), gate.constraint_for, gate.system_context(item), {}
    )
    return engine, fitted


def record(lengths, scores=None):
    chunks = []
    for i, n in enumerate(lengths):
        chunk = {"id": f"c{i}", "text": " ".join(f"w{i}" for _ in range(n))}
        if scores:
            chunk["score"] = scores[i]
        chunks.append(chunk)
    return {"id": "r", "question": "What is it?", "chunks": chunks}


def test_water_level():
    assert water_level([10, 50, 100], 160) == 100
    assert water_level([10, 50, 100], 90) == 40
    assert water_level([10, 50, 100], 30) == 10
    assert water_level([], 10) == 0


def test_everything_fits_untouched():
    engine, f = fit(record([20, 30]), 8192)
    assert f.truncated_chunk_ids == [] and f.omitted_chunk_ids == []
    assert [c.label for c in f.shown] == [0, 1]
    assert engine.prompt_tokens(f.messages) + f.constraint.max_tokens <= 8192


def test_long_chunks_are_cut_to_an_equal_share_and_short_ones_kept():
    engine, f = fit(record([40, 5000, 6000]), 6000)
    assert f.omitted_chunk_ids == []
    assert f.truncated_chunk_ids == ["c1", "c2"]
    assert not f.shown[0].truncated and f.shown[0].text.count("w0") == 40
    assert f.shown[1].text.endswith(TRUNCATION_MARK)
    assert abs(f.shown[1].text.count("w1") - f.shown[2].text.count("w2")) <= 1
    assert engine.prompt_tokens(f.messages) + f.constraint.max_tokens <= 6000


def test_chunks_left_out_lowest_score_first_when_even_the_minimum_does_not_fit():
    lengths = [100] * 80
    scores = [float(i) for i in range(80)]  # later chunks score higher
    engine, f = fit(record(lengths, scores), 5000, min_chunk_tokens=50)
    assert f.omitted_chunk_ids
    omitted = {int(str(c)[1:]) for c in f.omitted_chunk_ids}
    kept = {int(str(c.id)[1:]) for c in f.shown}
    assert max(omitted) < min(kept)  # the lowest scores went first
    assert [c.label for c in f.shown] == list(range(len(f.shown)))
    assert f.constraint.key == f"sufficiency/{len(f.shown)}"
    assert engine.prompt_tokens(f.messages) + f.constraint.max_tokens <= 5000


def test_without_scores_the_last_chunks_go_first():
    _, f = fit(record([100] * 80), 5000, min_chunk_tokens=50)
    assert f.omitted_chunk_ids == [f"c{i}" for i in range(len(f.shown), 80)]


def test_long_question_is_cut_and_flagged():
    r = record([10])
    r["question"] = "why " * 2000
    _, f = fit(r, 8192, max_question_tokens=64)
    assert f.question_truncated


def test_no_room_at_all_is_a_clear_item_error():
    with pytest.raises(PromptTooLongError) as info:
        fit(record([10]), 3000)
    assert info.value.field == "chunks"


def sourced(n: int) -> dict:
    """``n`` short chunks, each with a long source name (a URL: its label and source
    cost far more tokens than the chunk's minimum share)."""
    url = "https://en.wikipedia.org/wiki/Sydney_Harbour_Bridge#section-{}-history-and-design"
    chunks = [{"id": f"c{i}", "text": "Bradfield designed the bridge.", "source": url.format(i)} for i in range(n)]
    return {"id": "r", "question": "Who designed the bridge?", "chunks": chunks}


def test_many_chunks_with_long_sources_leave_out_only_what_does_not_fit():
    _, f = fit(sourced(400), 6000, max_chunks=400)
    # One more chunk (its label, source and minimum share) would not have fitted.
    _, more = fit({**sourced(400), "chunks": sourced(400)["chunks"][: len(f.shown) + 1]}, 6000, max_chunks=400)
    assert len(more.omitted_chunk_ids) == 1


def test_a_window_spent_on_the_output_says_so():
    with pytest.raises(PromptTooLongError) as info:
        fit(record([10]), 2400)
    assert "the output's worst case takes" in str(info.value)


class CountingEngine(ScriptedEngine):
    """Records the longest text handed to the tokenizer."""

    longest = 0

    def count_tokens(self, texts):
        self.longest = max([self.longest, *(len(t) for t in texts)])
        return super().count_tokens(texts)

    def truncate(self, text, max_tokens):
        self.longest = max(self.longest, len(text))
        return super().truncate(text, max_tokens)


def fit_on(engine, record):
    gate = SufficiencyGate()
    item = parse_record(record)
    return fit_prompt(engine, gate.template, item, JudgeConfig(), gate.constraint_for, gate.system_context(item), {})


def test_a_huge_chunk_is_cut_before_it_reaches_the_tokenizer():
    engine = CountingEngine(lambda r: "", max_model_len=4096)
    fit_on(engine, {"id": "r", "question": "Who?", "chunks": [{"id": 0, "text": "Ada wrote it. " * 400_000}]})
    assert engine.longest <= 4096 * CHARS_PER_TOKEN_MAX


def test_a_chunk_cut_before_counting_is_flagged_even_if_what_is_left_would_fit():
    # Spaces count as no word for the scripted tokenizer: what is left after the cut
    # is short in tokens, but the chunk was cut all the same.
    text = "Ada" + " " * (8192 * CHARS_PER_TOKEN_MAX) + "wrote it."
    f = fit_on(
        ScriptedEngine(lambda r: "", max_model_len=8192),
        {"id": "r", "question": "Who?", "chunks": [{"id": 0, "text": text}]},
    )
    assert f.truncated_chunk_ids == [0]


def test_a_huge_question_is_cut_before_it_reaches_the_tokenizer():
    engine = CountingEngine(lambda r: "", max_model_len=4096)
    fit_on(engine, {"id": "r", "question": "Who? " * 1_000_000, "chunks": [{"id": 0, "text": "Ada."}]})
    assert engine.longest <= 4096 * CHARS_PER_TOKEN_MAX
