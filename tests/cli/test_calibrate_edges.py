"""``suffice calibrate`` at its edges, on a scripted engine (the real engine runs it in
test_calibrate_cmd.py): golden records without ids or with repeated ones, labels that
are not booleans, one class only, a shorter rerun, no matplotlib, bad paths."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

from suffice.cli.main import main
from suffice.exceptions import EXIT_FATAL, EXIT_OK, EXIT_USAGE
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine


def scripted(request: GenerationRequest) -> str:
    """A sufficiency verdict whose confidence and decision the question names."""
    found = re.search(r"conf=([0-9.]+) suff=([01])", request.messages[-1]["content"])
    confidence, sufficient = (float(found.group(1)), found.group(2) == "1") if found else (0.8, True)
    verdict = {
        "required_entities": [{"entity": "Ada", "covered": True}],
        "contradictions": [],
        "reasoning": "r",
        "is_sufficient": sufficient,
        "missing_information": [] if sufficient else ["more"],
        "confidence": confidence,
        "useful_chunk_ids": [0],
    }
    return json.dumps(verdict, separators=(",", ":"))


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Judge.open on the scripted engine; the list counts the engines opened."""
    count: list[int] = []

    def open_scripted(cls: type[Judge], config: object) -> Judge:
        count.append(1)
        return cls(ScriptedEngine(scripted), config=config)  # type: ignore[arg-type]

    monkeypatch.setattr(Judge, "open", classmethod(open_scripted))
    return count


def record(i: int, confidence: float, sufficient: bool, label: object, **extra: object) -> dict[str, object]:
    question = f"Who wrote it? conf={confidence} suff={int(sufficient)}"
    out = {"id": f"r{i}", "question": question, "chunks": [{"id": 0, "text": "Ada wrote it."}], "sufficient": label}
    out.update(extra)
    return out


SEPARABLE = [record(0, 0.9, True, True), record(1, 0.8, True, True), record(2, 0.7, False, False)]


def calibrate(tmp_path: Path, records: list[dict[str, object]], *extra: str) -> tuple[int, Path]:
    golden, out = tmp_path / "golden-in.jsonl", tmp_path / "calib"
    golden.write_text("".join(json.dumps(r) + "\n" for r in records))
    return main(["calibrate", str(golden), "-o", str(out), "--no-progress", *extra]), out


def report(out: Path) -> dict[str, object]:
    return json.loads((out / "report.json").read_text())


def test_ragas_records_without_ids_are_scored_against_their_labels(tmp_path, opened):
    ragas = [
        {
            "user_input": f"Who wrote it? conf={c} suff={int(s)}",
            "retrieved_contexts": ["Ada wrote it."],
            "sufficient": y,
        }
        for c, s, y in [(0.9, True, True), (0.8, True, True), (0.7, False, False)]
    ]
    code, out = calibrate(tmp_path, ragas)
    assert code == EXIT_OK
    assert report(out)["scores"]["self_confidence"]["n"] == 3  # type: ignore[index]


def test_a_repeated_id_scores_the_first_records_verdict_against_the_first_records_label(tmp_path, opened):
    records = [*SEPARABLE, record(0, 0.1, False, False)]  # r0 again, labelled the other way
    code, out = calibrate(tmp_path, records)
    scores = report(out)["scores"]["self_confidence"]  # type: ignore[index]
    assert code != EXIT_USAGE
    assert scores["n"] == 3
    assert scores["auc"] == 1.0


def test_a_shorter_rerun_leaves_out_the_earlier_rows_without_calling_them_errors(tmp_path, opened):
    records = [*SEPARABLE, record(3, 0.6, True, True), record(4, 0.2, False, False)]
    calibrate(tmp_path, records)
    code, out = calibrate(tmp_path, records, "--limit", "3")
    skipped = report(out)["skipped"]
    assert code == EXIT_OK
    assert skipped == {"error": 0, "unlabeled": 0, "not_in_golden": 2}  # type: ignore[comparison-overlap]


@pytest.mark.parametrize("label", ["true", 1, 0.0])
def test_a_label_that_is_not_a_boolean_is_refused_before_judging(tmp_path, opened, capsys, label):
    code, _ = calibrate(tmp_path, [*SEPARABLE, record(3, 0.6, True, label)])
    assert code == EXIT_USAGE
    assert "record 4: sufficient must be true or false" in capsys.readouterr().err
    assert opened == []


def test_golden_records_without_any_label_are_refused_before_judging(tmp_path, opened):
    code, _ = calibrate(tmp_path, [record(0, 0.9, True, None)])
    assert code == EXIT_USAGE
    assert opened == []


@pytest.mark.parametrize("label", [True, False])
def test_golden_data_of_one_class_saves_no_threshold(tmp_path, opened, capsys, label):
    config = tmp_path / "gate.json"
    records = [record(i, 0.5 + i / 10, True, label) for i in range(4)]
    code, _ = calibrate(tmp_path, records, "--save", str(config))
    assert code == EXIT_USAGE
    assert not config.exists()
    assert "no threshold is saved" in capsys.readouterr().err


def test_without_matplotlib_the_report_is_written_and_says_the_plots_are_left_out(tmp_path, opened, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code, out = calibrate(tmp_path, SEPARABLE)
    assert code == EXIT_OK
    assert "matplotlib" in report(out)["plots_missing"]  # type: ignore[operator]
    assert "plots left out" in (out / "report.md").read_text()


def test_an_output_that_is_a_file_is_refused(tmp_path, opened):
    (tmp_path / "calib").write_text("not a folder")
    code, _ = calibrate(tmp_path, SEPARABLE)
    assert code == EXIT_USAGE
    assert opened == []


def test_a_negative_limit_is_refused(tmp_path, opened):
    code, _ = calibrate(tmp_path, SEPARABLE, "--limit", "-1")
    assert code == EXIT_USAGE


def test_a_save_config_that_is_a_folder_is_refused_before_judging(tmp_path, opened):
    code, _ = calibrate(tmp_path, SEPARABLE, "--save", str(tmp_path))
    assert code == EXIT_USAGE
    assert opened == []


def test_a_rubric_version_that_exists_is_refused_before_judging(tmp_path, opened, capsys):
    from suffice.gates.adequacy.store import RubricStore, next_rubric_path

    taken = next_rubric_path(RubricStore().get("customer-support"), tmp_path / "calib" / "rubrics")
    taken.parent.mkdir(parents=True)
    taken.write_text("{}")
    code, _ = calibrate(tmp_path, SEPARABLE, "--gate", "adequacy", "--rubric", "customer-support", "--save")
    assert code == EXIT_USAGE
    assert opened == []
    assert taken.read_text() == "{}"


def _edit_second_verdict(out: Path, confidence: object) -> None:
    """Set the confidence of verdicts.jsonl's second row (a resumed file edited or
    written by something else): the resume keeps the row, the report scores it."""
    path = out / "verdicts.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[1])
    row["verdict"]["confidence"] = confidence
    lines[1] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("confidence", [float("nan"), None, "high"])
def test_a_resumed_verdict_whose_score_is_not_a_number_stops_with_exit_1(tmp_path, opened, confidence):
    _, out = calibrate(tmp_path, SEPARABLE)
    _edit_second_verdict(out, confidence)
    code, _ = calibrate(tmp_path, SEPARABLE)
    assert code == EXIT_FATAL


@pytest.mark.parametrize("confidence", [float("nan"), None, "high"])
def test_a_resumed_verdict_whose_score_is_not_a_number_is_named_by_file_and_line(tmp_path, opened, capsys, confidence):
    _, out = calibrate(tmp_path, SEPARABLE)
    _edit_second_verdict(out, confidence)
    capsys.readouterr()
    calibrate(tmp_path, SEPARABLE)
    assert re.search(rf"{re.escape(str(out / 'verdicts.jsonl'))}: verdict\S*: line 2\b", capsys.readouterr().err)


def test_a_resumed_verdict_whose_score_is_not_a_number_writes_no_report(tmp_path, opened):
    _, out = calibrate(tmp_path, SEPARABLE)
    (out / "report.json").unlink()
    _edit_second_verdict(out, float("nan"))
    calibrate(tmp_path, SEPARABLE)
    assert not (out / "report.json").exists()


#: Every verdict the same confidence and decision, whatever the label: no ranking.
UNINFORMATIVE = [record(i, 0.8, True, i % 2 == 0) for i in range(4)]


def test_saving_a_threshold_of_a_score_no_better_than_chance_warns(tmp_path, opened, capsys):
    calibrate(tmp_path, UNINFORMATIVE, "--save", str(tmp_path / "gate.json"))
    assert "no better than chance" in capsys.readouterr().err


def test_saving_a_threshold_of_a_score_no_better_than_chance_still_saves_it(tmp_path, opened):
    calibrate(tmp_path, UNINFORMATIVE, "--save", str(tmp_path / "gate.json"))
    assert (tmp_path / "gate.json").exists()


def test_saving_a_threshold_of_a_separating_score_does_not_warn(tmp_path, opened, capsys):
    calibrate(tmp_path, SEPARABLE, "--save", str(tmp_path / "gate.json"))
    assert "no better than chance" not in capsys.readouterr().err


def test_a_damaged_compressed_golden_file_is_exit_2_naming_it(tmp_path, opened, capsys):
    """read_records raised a ConfigError outside any handler: a traceback."""
    golden = tmp_path / "golden.jsonl.gz"
    lines = b"".join(json.dumps(record(i, 0.8, True, True)).encode() + b"\n" for i in range(50))
    golden.write_bytes(gzip.compress(lines)[:-20])
    status = main(["calibrate", str(golden), "-o", str(tmp_path / "rep"), "--no-progress"])
    assert status == EXIT_USAGE
    assert "cannot be read after line" in capsys.readouterr().err


#: self_confidence 0.9 .. 0.4 against labels T T F T T F: best F1 at 0.5 (one false
#: positive), least cost at 5:1 at 0.8 (none).
LABELED = [(0.9, True), (0.8, True), (0.7, False), (0.6, True), (0.5, True), (0.4, False)]
COSTLY = [record(i, c, True, y) for i, (c, y) in enumerate(LABELED)]


def _saved(tmp_path: Path, *extra: str) -> dict[str, object]:
    tmp_path.mkdir(exist_ok=True)
    config = tmp_path / "gate.json"
    code, _ = calibrate(tmp_path, COSTLY, "--score", "self_confidence", "--save", str(config), *extra)
    assert code == EXIT_OK
    return json.loads(config.read_text())


def test_choose_cost_minimises_the_expected_cost_the_user_gives(tmp_path, opened):
    assert _saved(tmp_path / "f1")["threshold"] == 0.5
    saved = _saved(tmp_path / "cost", "--choose", "cost", "--fp-cost", "5", "--fn-cost", "1")
    assert saved["threshold"] == 0.8
    metrics = saved["metrics"]
    assert metrics["rule"] == "cost" and metrics["fp_cost"] == 5 and metrics["expected_cost"] == pytest.approx(2 / 6)


def test_costs_alone_choose_by_cost(tmp_path, opened):
    assert _saved(tmp_path, "--fp-cost", "5")["threshold"] == 0.8


@pytest.mark.parametrize("flags", [["--beta", "0"], ["--fp-cost", "-1"], ["--fp-cost", "0", "--fn-cost", "0"]])
def test_a_choice_no_threshold_can_be_chosen_by_is_refused_before_judging(tmp_path, opened, flags):
    code, _ = calibrate(tmp_path, COSTLY, "--save", str(tmp_path / "gate.json"), *flags)
    assert code == EXIT_USAGE and opened == []


def test_a_golden_set_under_the_seeds_minimum_is_warned_about(tmp_path, opened, capsys):
    calibrate(tmp_path, SEPARABLE)
    err = capsys.readouterr().err
    assert "warning: 3 labeled records" in err and "100+" in err


def test_a_golden_set_of_the_seeds_minimum_is_not_warned_about(tmp_path, opened, capsys):
    records = [record(i, 0.5 + (i % 5) / 10, True, i % 5 > 1) for i in range(100)]
    calibrate(tmp_path, [*records, record(100, 0.5, True, None)])  # the unlabeled one does not count
    assert "labeled records" not in capsys.readouterr().err
    (tmp_path / "less").mkdir()
    calibrate(tmp_path / "less", records[:99])
    assert "warning: 99 labeled records" in capsys.readouterr().err
