"""``suffice judge --server`` sends the judge settings a request may set (declared ``per_request``: ``suffice schema
--request``) that the user set, by flag, ``SUFFICE_*`` variable or the settings file, with every request to a real
``suffice serve`` on loopback (a scripted engine); one it cannot send is a typed error naming it, not dropped.

The proof that the service judged with the setting: under ``--detail auto`` each row's ``cascade.margin`` is the
``auto_margin`` its judge used, and a record whose decision probability (0.7) lies within 0.3 of the threshold but not
within the service's 0.1 gets a full verdict only with the setting sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suffice import Client
from suffice.batch import judge_file
from suffice.batch.run_settings import settings_path
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import EXIT_OK, STATUS, ConfigError
from tests.batch.test_runner import rows, write_lines
from tests.test_cascade import CascadeEngine
from tests.test_client import serve
from tests.test_judge import rec

#: Each record's probability of a sufficient decision: 0.2 from the threshold.
P = {i: 0.7 for i in range(3)}


def cascade_rows(out: Path) -> list[tuple[str, float]]:
    """Each row's cascade: the detail its verdict is, and the margin it was judged under."""
    return [(row["cascade"]["detail"], row["cascade"]["margin"]) for row in rows(out)]


def source_of(tmp_path: Path) -> Path:
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(rec(i)).encode() for i in P])
    return source


@pytest.mark.parametrize("given_by", ["flag", "variable", "file"])
def test_a_per_request_setting_the_user_set_reaches_the_service(tmp_path, monkeypatch, given_by):
    source, out = source_of(tmp_path), tmp_path / "out.jsonl"
    argv = ["judge", str(source), "-o", str(out), "--detail", "auto", "--no-progress"]
    if given_by == "flag":
        argv += ["--auto-margin", "0.3"]
    elif given_by == "variable":
        monkeypatch.setenv("SUFFICE_AUTO_MARGIN", "0.3")
    else:
        (tmp_path / "suffice.toml").write_text("auto_margin = 0.3\n")
        argv += ["--config", str(tmp_path / "suffice.toml")]
    engine = CascadeEngine(P)
    with serve(engine, judge=JudgeConfig(detail="auto")) as url:
        assert main([*argv, "--server", url]) == EXIT_OK
    assert cascade_rows(out) == [("full", 0.3)] * 3  # the service's own margin (0.1) gives decisions
    assert engine.kinds == [["decision"] * 3, ["full"] * 3]
    assert json.loads(settings_path(out).read_text())["auto_margin"] == "0.3"


def test_a_setting_the_user_set_to_its_default_is_sent_too_over_the_services_own(tmp_path):
    source, out = source_of(tmp_path), tmp_path / "out.jsonl"
    argv = ["judge", str(source), "-o", str(out), "--detail", "auto", "--auto-margin", "0.1", "--no-progress"]
    with serve(CascadeEngine(P), judge=JudgeConfig(detail="auto", auto_margin=0.3)) as url:
        assert main([*argv, "--server", url]) == EXIT_OK
    assert cascade_rows(out) == [("decision", 0.1)] * 3


def test_without_the_setting_the_service_judges_with_its_own(tmp_path):
    source, out = source_of(tmp_path), tmp_path / "out.jsonl"
    with serve(CascadeEngine(P), judge=JudgeConfig(detail="auto")) as url:
        argv = ["judge", str(source), "-o", str(out), "--detail", "auto", "--no-progress", "--server", url]
        assert main(argv) == EXIT_OK
    assert cascade_rows(out) == [("decision", 0.1)] * 3
    assert "auto_margin" not in json.loads(settings_path(out).read_text())


def test_a_run_in_python_through_a_client_sends_the_configs_per_request_settings(tmp_path):
    source, out = source_of(tmp_path), tmp_path / "out.jsonl"
    with serve(CascadeEngine(P), judge=JudgeConfig(detail="auto")) as url, Client(url) as client:
        judge_file(JudgeConfig(detail="auto", auto_margin=0.3), source, out, client=client)
    assert cascade_rows(out) == [("full", 0.3)] * 3


def test_an_output_judged_with_a_setting_is_not_extended_without_it(tmp_path, capsys):
    source, out = source_of(tmp_path), tmp_path / "out.jsonl"
    argv = ["judge", str(source), "-o", str(out), "--detail", "auto", "--no-progress"]
    with serve(CascadeEngine(P), judge=JudgeConfig(detail="auto")) as url:
        assert main([*argv, "--auto-margin", "0.3", "--server", url]) == EXIT_OK
        write_lines(source, [json.dumps(rec(i)).encode() for i in range(4)])
        assert main([*argv, "--server", url]) != EXIT_OK
    assert "auto_margin" in capsys.readouterr().err
    assert len(rows(out)) == 3


@pytest.mark.parametrize(
    ("settings", "named"),
    [({"detail": "decision"}, "detail"), ({"cache": "off"}, "cache"), ({"max_chunks": 0}, "max_chunks")],
)
def test_a_client_refuses_a_judge_setting_a_request_cannot_carry_naming_it(settings, named):
    with pytest.raises(ConfigError) as caught:
        Client("http://127.0.0.1:9", judge_settings=settings)
    assert caught.value.parameter == named


def test_the_settings_a_client_sends_are_in_the_settings_the_service_reports():
    with serve(CascadeEngine(P), judge=JudgeConfig(detail="auto")) as url:
        with Client(url, judge_settings={"auto_margin": 0.25}) as client:
            assert client.settings()["auto_margin"] == "0.25"
        with Client(url) as client:
            assert "auto_margin" not in client.settings()


def test_a_detail_other_than_the_services_is_a_usage_error_naming_it(tmp_path, capsys):
    """``detail`` is the service's (it is not sent): set otherwise, the command stops before any request."""
    source, out = source_of(tmp_path), tmp_path / "out.jsonl"
    engine = CascadeEngine(P)
    with serve(engine) as url:
        status = main(["judge", str(source), "-o", str(out), "--detail", "decision", "--server", url])
    assert status == STATUS[ConfigError].exit
    assert "detail" in capsys.readouterr().err
    assert engine.kinds == [] and not out.exists()
