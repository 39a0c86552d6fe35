"""``suffice judge --server``: a file judged through a running ``suffice serve`` (a real uvicorn on
loopback over a scripted engine) writes what the in-process run writes, resumes, and refuses to
extend an output made with other settings.  Generation through a real service is proven in
``test_a_few_records_through_the_sessions_suffice_serve``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from suffice import Client
from suffice.batch import BatchOptions, judge_file
from suffice.batch.run_settings import settings_path
from suffice.cli.main import main
from suffice.config import JudgeConfig
from suffice.exceptions import (
    EXIT_FATAL,
    EXIT_ITEM_ERRORS,
    EXIT_OK,
    EXIT_USAGE,
    ConfigError,
    OutputMismatchError,
    ServiceUnavailableError,
)
from suffice.serving.engine_config import EngineConfig
from tests.batch.test_runner import CONFIG, DyingEngine, good, opener, record, rows, write_lines
from tests.fakes import ScriptedEngine
from tests.test_client import KEY, serve

#: Good records, one without a question (an error row), one whose line is not JSON.
LINES = [json.dumps(record(0)).encode(), json.dumps({"id": "no-q", "chunks": []}).encode()] + [
    json.dumps(record(i)).encode() for i in range(1, 4)
]


def in_process(source: Path, out: Path, options: BatchOptions | None = None) -> None:
    judge_file(CONFIG, source, out, options, open_judge=opener(ScriptedEngine(good)))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_run_through_the_service_writes_the_in_process_runs_output(tmp_path, suffix):
    source = tmp_path / "in.jsonl"
    write_lines(source, LINES)
    local, remote = tmp_path / f"local{suffix}", tmp_path / f"remote{suffix}"
    in_process(source, local, BatchOptions(batch_size=2))
    with serve(ScriptedEngine(good)) as url, Client(url) as client:
        report = judge_file(CONFIG, source, remote, BatchOptions(batch_size=2), client=client)
    if suffix == ".jsonl":
        assert rows(remote) == rows(local)
    else:
        assert pq.read_table(remote).to_pylist() == pq.read_table(local).to_pylist()
    assert settings_path(remote).read_text() == settings_path(local).read_text()
    assert report.errors == 1


def test_a_line_that_is_not_json_gets_the_in_process_error_without_being_sent(tmp_path):
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(0)).encode(), b"{not json"])
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    in_process(source, local)
    engine = ScriptedEngine(good)
    with serve(engine) as url, Client(url) as client:
        judge_file(CONFIG, source, remote, client=client)
    assert rows(remote)[1]["error"] == rows(local)[1]["error"]
    assert engine.calls == [1]


def test_a_rerun_through_the_service_judges_only_the_records_without_a_row(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(3)])
    in_process(source, out)
    write_lines(source, [json.dumps(record(i)).encode() for i in range(5)])
    engine = ScriptedEngine(good)
    with serve(engine) as url, Client(url) as client:
        report = judge_file(CONFIG, source, out, client=client)
    assert report.skipped == 3
    assert engine.calls == [2]
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(5)]


def test_a_run_stopped_by_the_service_resumes_to_the_in_process_output(tmp_path):
    source, out, local = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "local.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(6)])
    with serve(DyingEngine(calls=1)) as url, Client(url) as client, pytest.raises(ServiceUnavailableError):
        judge_file(CONFIG, source, out, BatchOptions(batch_size=2), client=client)
    assert [row["id"] for row in rows(out)] == ["r0", "r1"]
    engine = ScriptedEngine(good)
    with serve(engine) as url, Client(url) as client:
        judge_file(CONFIG, source, out, BatchOptions(batch_size=2), client=client)
    in_process(source, local, BatchOptions(batch_size=2))
    assert engine.calls == [2, 2]
    assert rows(out) == rows(local)


@pytest.mark.parametrize(
    ("written_with", "served_with", "setting"),
    [
        (JudgeConfig(engine=EngineConfig(backend="outlines")), JudgeConfig(), "backend"),
        (JudgeConfig(), JudgeConfig(engine=EngineConfig(max_model_len=2048)), "max_model_len"),
    ],
)
def test_an_output_made_with_other_settings_is_not_extended_through_the_service(
    tmp_path, written_with, served_with, setting
):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    judge_file(written_with, source, out, open_judge=opener(ScriptedEngine(good)))
    before = out.read_bytes()
    write_lines(source, [json.dumps(record(i)).encode() for i in range(2)])
    engine = ScriptedEngine(good)
    with serve(engine, judge=served_with) as url, Client(url) as client, pytest.raises(OutputMismatchError) as caught:
        judge_file(CONFIG, source, out, client=client)
    assert caught.value.setting == setting
    assert out.read_bytes() == before
    assert engine.calls == []


def test_an_output_made_with_other_gate_options_is_not_extended_through_the_service(tmp_path):
    """The recovery gate's threshold is an option a request sets; records without a response need no model."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    strict = JudgeConfig(gate="recovery", options={"threshold": "strict"})
    loose = JudgeConfig(gate="recovery", options={"threshold": "loose"})
    with serve(ScriptedEngine(good), gates=("recovery",)) as url, Client(url) as client:
        judge_file(strict, source, out, client=client)
        with pytest.raises(OutputMismatchError) as caught:
            judge_file(loose, source, out, client=client)
    assert caught.value.setting == "threshold"


@pytest.mark.parametrize(
    ("config", "parameter"),
    [
        (JudgeConfig(detail="decision"), "detail"),
        (JudgeConfig(options={"gate_config": "calibrated.json"}), "gate_config"),
        (JudgeConfig(gate="recovery"), "gate"),
    ],
)
def test_what_the_service_does_not_judge_is_a_config_error_naming_it(tmp_path, config, parameter):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    with serve(ScriptedEngine(good)) as url, Client(url) as client, pytest.raises(ConfigError) as caught:
        judge_file(config, source, out, client=client)
    assert caught.value.parameter == parameter
    assert not out.exists()


def test_a_record_the_service_refuses_gets_an_error_row_and_the_rest_are_judged(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i, "x" * (2000 if i == 1 else 10))).encode() for i in range(4)])
    with serve(ScriptedEngine(good), max_field_chars=1000) as url, Client(url) as client:
        report = judge_file(CONFIG, source, out, client=client)
    written = rows(out)
    assert [row["error"] is None for row in written] == [True, False, True, True]
    assert written[1]["error"]["type"] == "InvalidRequestError"
    assert written[1]["error"]["field"] == "text"
    assert report.errors == 1


# --- the command --------------------------------------------------------------------------------------------


def test_the_command_judges_through_the_service_with_its_key(tmp_path, capsys):
    source, out, key = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "key"
    write_lines(source, LINES)
    key.write_text(KEY + "\n")
    with serve(ScriptedEngine(good), key=KEY) as url:
        status = main(["judge", str(source), "-o", str(out), "--server", url, "--api-key-file", str(key)])
        again = main(["judge", str(source), "-o", str(out), "--server", url, "--api-key-file", str(key)])
    assert status == EXIT_ITEM_ERRORS
    assert len(rows(out)) == len(LINES)
    assert again == EXIT_ITEM_ERRORS
    assert "nothing to do" in capsys.readouterr().err


def test_a_refused_key_is_a_usage_error_that_writes_nothing(tmp_path, capsys):
    source, out, key = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "key"
    write_lines(source, [json.dumps(record(0)).encode()])
    key.write_text("w" * 32 + "\n")
    with serve(ScriptedEngine(good), key=KEY) as url:
        status = main(["judge", str(source), "-o", str(out), "--server", url, "--api-key-file", str(key)])
    assert status == EXIT_USAGE
    assert "401" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl", "key"]


def test_a_service_that_stops_answering_is_exit_1_and_the_same_command_resumes(tmp_path, capsys):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_lines(source, [json.dumps(record(i)).encode() for i in range(4)])
    argv = ["judge", str(source), "-o", str(out), "--batch-size", "2", "--no-progress"]
    with serve(DyingEngine(calls=1)) as url:
        status = main([*argv, "--server", url])
    assert status == EXIT_FATAL
    assert "rerun the same command" in capsys.readouterr().err
    with serve(ScriptedEngine(good)) as url:
        assert main([*argv, "--server", url]) == EXIT_OK
    assert [row["id"] for row in rows(out)] == [f"r{i}" for i in range(4)]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--backend", "outlines"], "--backend"),
        (["--model", "/models/judge"], "--model"),
        (["--engine", "openai"], "--engine"),
        (["--ray"], "--ray"),
        (["--dtype", "bfloat16"], "--dtype"),
    ],
)
def test_an_in_process_setting_with_server_is_a_usage_error_naming_the_flag(tmp_path, capsys, flags, named):
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    argv = ["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--server", "http://127.0.0.1:9", *flags]
    assert main(argv) == EXIT_USAGE
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("server", "keyed", "why"),
    [
        ("http://user:hunter2hunter2@127.0.0.1:9", False, "holds credentials"),
        ("http://ops:hunter2hunter2@203.0.113.7:8000", True, "holds credentials"),
        ("http://203.0.113.7:8000", True, "plain http to 203.0.113.7, another machine"),
        ("127.0.0.1:8765", False, "must start with http:// or https://"),
    ],
)
def test_a_server_address_that_would_expose_a_secret_is_refused_before_anything_is_sent(
    tmp_path, capsys, monkeypatch, server, keyed, why
):
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a connection was attempted")

    monkeypatch.setattr("socket.socket.connect", refuse)
    source, key = tmp_path / "in.jsonl", tmp_path / "key"
    write_lines(source, [json.dumps(record(0)).encode()])
    key.write_text(KEY + "\n")
    argv = ["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--server", server]
    assert main([*argv, *(["--api-key-file", str(key)] if keyed else [])]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "server=" in err and why in err
    assert "hunter2" not in err and KEY not in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl", "key"]


def test_plain_http_to_another_machine_with_a_key_is_allowed_when_asked(tmp_path, monkeypatch):
    sent = []
    monkeypatch.setattr("suffice.cli.judge_cmd.judge_file", lambda *args, client, **kwargs: sent.append(client) or 0)
    source, key = tmp_path / "in.jsonl", tmp_path / "key"
    write_lines(source, [json.dumps(record(0)).encode()])
    key.write_text(KEY + "\n")
    argv = ["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--server", "http://203.0.113.7:8000"]
    assert main([*argv, "--api-key-file", str(key), "--allow-insecure-http"]) == EXIT_OK
    assert sent[0].base_url == "http://203.0.113.7:8000"


def test_a_timeout_without_server_is_a_usage_error(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    assert main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--timeout", "5"]) == EXIT_USAGE
    assert "timeout" in capsys.readouterr().err


@pytest.mark.engine
def test_a_few_records_through_the_sessions_suffice_serve(tmp_path, suffice_server, squad_records):
    from tests.vllm_server import SERVE_KEY

    source, out, key = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "key"
    write_lines(source, [json.dumps(r).encode() for r in squad_records[:2]])
    key.write_text(SERVE_KEY + "\n")
    argv = ["judge", str(source), "-o", str(out), "--server", suffice_server, "--api-key-file", str(key)]
    assert main([*argv, "--no-progress"]) == EXIT_OK
    written = rows(out)
    assert [row["id"] for row in written] == [str(r["id"]) for r in squad_records[:2]]
    assert all(row["verdict"]["prompt_version"] == row["prompt_version"] for row in written)
    assert json.loads(settings_path(out).read_text())["engine"] == "openai"


# --- the settings route ---------------------------------------------------------------------------------------


def test_the_settings_a_service_reports_name_its_model_folder_without_its_path(tmp_path):
    folder = tmp_path / "models" / "my-judge"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    served = JudgeConfig(engine=EngineConfig(model=folder))
    with serve(ScriptedEngine(good), judge=served) as url, Client(url) as client:
        settings = client.settings()
    assert settings["model"] == "my-judge"


def test_an_option_the_gate_does_not_take_is_refused_by_the_settings_route_naming_it():
    with serve(ScriptedEngine(good)) as url, Client(url) as client, pytest.raises(ConfigError) as caught:
        client.settings(options={"no_such_option": 1})
    assert caught.value.parameter == "no_such_option"
