"""The command line's progress bar, driven through the batch runner by a scripted engine that, like vLLM, reports
each prompt read before any record finishes, on a clock the test moves (no timings)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from suffice.batch import judge_file
from suffice.exceptions import ConfigError
from suffice.judge import Judge
from suffice.serving.base import CappedProgress, OnRecords, Progress, report_read
from suffice.serving.progress import RecordBar
from tests.batch.test_runner import CONFIG, good, record, write_lines
from tests.fakes import ScriptedEngine

#: Seconds the engine takes to start (the demo's was about 50), to read a prompt, to finish a record.
START_UP, READ, DECODE = 50.0, 0.5, 1.5


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ReadsPromptsFirst(ScriptedEngine):
    """Every prompt of the batch is read, then the records finish one by one."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(good)
        self.clock = clock

    def generate(self, requests, progress=None, cancel=None):  # type: ignore[no-untyped-def]
        for _ in requests:
            self.clock.now += READ
            report_read(progress, 1)
        out = super().generate(requests, None, cancel)
        for _ in requests:
            self.clock.now += DECODE
            if progress is not None:
                progress(1)
        return out


def run(tmp_path: Path, n: int, *, already: int = 0) -> list[str]:
    """Judge ``n`` records (the first ``already`` of them answered by an earlier run); every frame the bar drew."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    clock = Clock()
    if already:
        write_lines(source, [json.dumps(record(i)).encode() for i in range(already)])
        judge_file(CONFIG, source, out, open_judge=lambda config: Judge(ReadsPromptsFirst(clock), config=config))
    write_lines(source, [json.dumps(record(i)).encode() for i in range(n)])
    screen = io.StringIO()

    def bar(total: int | None, done: int):  # type: ignore[no-untyped-def]
        made = RecordBar(total, done, file=screen, clock=clock, mininterval=0)
        return made, made.close

    def start(config):  # type: ignore[no-untyped-def]
        clock.now += START_UP
        return Judge(ReadsPromptsFirst(clock), config=config)

    judge_file(CONFIG, source, out, progress=bar, open_judge=start)
    return [frame.strip() for frame in re.split(r"[\r\n]", screen.getvalue()) if frame.strip()]


def counts(frames: list[str], total: int) -> list[str]:
    return [m.group(1) for frame in frames if (m := re.search(rf"(\S+)/{total} \[", frame))]


def eta_seconds(frame: str) -> int | None:
    found = re.search(r"ETA (\d+):(\d+)", frame)
    return None if found is None else int(found.group(1)) * 60 + int(found.group(2))


def test_the_bar_counts_whole_records_at_every_frame(tmp_path):
    shown = counts(run(tmp_path, 6), 6)
    assert shown and all(count.isdigit() for count in shown), shown


def test_the_bar_shows_prompts_read_before_any_record_is_done(tmp_path):
    frames = run(tmp_path, 6)
    assert any("0/6" in frame and "prompts read 6" in frame for frame in frames), frames


def test_the_bar_ends_at_its_total(tmp_path):
    assert counts(run(tmp_path, 6), 6)[-1] == "6"


def test_no_eta_is_shown_before_a_record_is_done(tmp_path):
    frames = run(tmp_path, 6)
    before = [frame for frame in frames if "0/6" in frame]
    assert before and not any("ETA" in frame for frame in before), before


def test_the_first_eta_leaves_the_engines_start_up_out(tmp_path):
    """Timed from the first prompt reported read: five more prompts (2.5 s) and one record (1.5 s) took 4 s, so five
    more records take 20 s (with the 50 s start-up counted it would be 270 s)."""
    frames = run(tmp_path, 6)
    first = next(eta_seconds(frame) for frame in frames if eta_seconds(frame) is not None)
    assert first == 5 * (5 * READ + DECODE)


def test_records_a_resumed_run_passes_over_are_not_in_its_rate(tmp_path):
    """Four of ten answered before: the six judged now time the rate, and the four advance the count only."""
    frames = run(tmp_path, 10, already=4)
    first = next(eta_seconds(frame) for frame in frames if eta_seconds(frame) is not None)
    assert first == 5 * (5 * READ + DECODE)


def test_a_bar_whose_engine_reports_no_prompts_times_from_its_first_records():
    """An engine that reports only finished records (the openai engine, Ray): the first report starts the clock
    and is left out of the rate, so the ETA comes from the second."""
    clock, screen = Clock(), io.StringIO()
    bar = RecordBar(4, file=screen, clock=clock, mininterval=0)
    clock.now = 60.0
    bar(1)
    clock.now = 62.0
    bar(1)
    assert "ETA 00:04" in screen.getvalue().rsplit("\r", 1)[-1]


def test_a_bar_of_unknown_total_shows_a_rate_and_no_eta():
    clock, screen = Clock(), io.StringIO()
    bar = RecordBar(None, file=screen, clock=clock, mininterval=0)
    bar.read(2)
    clock.now = 4.0
    bar(2)
    bar.close()
    assert re.search(r"2 rec \[.*0\.50 rec/s, prompts read 2\]", screen.getvalue())


def test_every_progress_of_suffice_implements_the_whole_protocol():
    """One protocol, every method implemented: no caller asks a progress what it can do."""
    methods = {"__call__"} | {name for name in vars(Progress) if not name.startswith("_")}
    assert methods == {"__call__", "read", "skipped"}
    for kind in (RecordBar, CappedProgress, OnRecords):
        assert all(callable(getattr(kind, name, None)) for name in methods), kind.__name__


def test_a_progress_that_is_not_a_function_is_refused_before_anything_is_judged(tmp_path: Path) -> None:
    engine = ScriptedEngine(good)
    with pytest.raises(ConfigError, match=r"progress=.*OnRecords"):
        Judge(engine, config=CONFIG).judge_batch([record(0)], progress=7)  # type: ignore[arg-type]
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    closed: list[bool] = []
    with pytest.raises(ConfigError, match="progress="):
        judge_file(
            CONFIG,
            source,
            out,
            progress=lambda total, done: ("not a progress", lambda: closed.append(True)),  # type: ignore[arg-type,return-value]
            open_judge=lambda config: Judge(engine, config=config),
        )
    assert engine.calls == [] and closed == [True]
