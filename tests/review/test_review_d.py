"""Reproductions from review D."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from suffice.batch import BatchOptions, Shard, judge_file
from suffice.cli import main as cli_main
from tests.batch.test_runner import CONFIG, good, opener, record, rows, write_lines
from tests.fakes import ScriptedEngine


# -- 1. Shard.parse: a digit str.isdigit() accepts but int() does not -------------------
@pytest.mark.parametrize("text", ["²/8", "3/²"])
def test_cli_refuses_a_superscript_shard_with_exit_2(tmp_path, capsys, text):
    source = tmp_path / "in.jsonl"
    write_lines(source, [json.dumps(record(0)).encode()])
    status = cli_main.main(["judge", str(source), "-o", str(tmp_path / "o.jsonl"), "--shard", text])
    assert status == 2
    assert "shard" in capsys.readouterr().err


# -- 2. calibrate: a damaged compressed golden file is a traceback, not exit 2 -----------
def test_calibrate_refuses_a_damaged_gz_golden_with_exit_2(tmp_path, capsys):
    golden = tmp_path / "golden.jsonl.gz"
    golden.write_bytes(gzip.compress(b"".join(json.dumps({**record(i), "label": True}).encode() + b"\n" for i in range(50)))[:-20])
    status = cli_main.main(["calibrate", str(golden), "-o", str(tmp_path / "rep")])
    assert status == 2
    assert "cannot be read after line" in capsys.readouterr().err


# -- 3. shards hide repeated ids from each other: the resume of concatenated outputs ----
#       keeps whichever row comes first in the file, so record A can end up with B's verdict
def test_concatenated_shards_keep_the_first_records_verdict_for_a_repeated_id(tmp_path):
    """README's own recipe (`cat out-*.jsonl > OUT.jsonl`, N=2): record A (line 2, shard 1)
    and record B (line 3, shard 0) share id X; out-0 comes first, so B's row is kept
    and relabelled line 2: A silently gets B's verdict, and A's own row is dropped."""
    source = tmp_path / "in.jsonl"
    a = {"id": "X", "question": "Who?", "chunks": [{"id": 0, "text": "Ada."}]}
    b = {"id": "X", "question": "Who wrote this much longer question about it?", "chunks": [{"id": 0, "text": "Ada."}]}
    write_lines(source, [json.dumps(record(0)).encode(), json.dumps(a).encode(), json.dumps(b).encode()])
    parts = []
    for k in range(2):
        out = tmp_path / f"out-{k}.jsonl"
        judge_file(CONFIG, source, out, BatchOptions(shard=Shard(k, 2)), open_judge=opener(ScriptedEngine(good)))
        parts.append(out)
    assert [r["error"] for r in rows(parts[0])] == [None, None]  # shard 0 judged B as a first X
    tokens_a = rows(parts[1])[0]["tokens"]["prompt"]
    whole = tmp_path / "all.jsonl"
    whole.write_bytes(b"".join(p.read_bytes() for p in parts))
    shutil.copy(parts[0].with_name("out-0.jsonl.settings.json"), whole.with_name("all.jsonl.settings.json"))
    judge_file(CONFIG, source, whole, BatchOptions(), open_judge=opener(ScriptedEngine(good)))
    got = rows(whole)
    assert [r["line"] for r in got] == [1, 2, 3]
    assert got[2]["error"]["type"] == "DuplicateIdError"
    assert got[1]["tokens"]["prompt"] == tokens_a  # line 2's row is record A's verdict, not B's


# -- 4. serve: a request naming a rubric whose prompt does not fit is a 500 -------------
def test_serve_a_rubric_too_long_for_the_window_is_not_an_internal_error():
    from fastapi.testclient import TestClient

    from suffice.config import JudgeConfig
    from suffice.server.app import create_app
    from suffice.server.config import ServeConfig
    from suffice.server.service import GateService

    config = ServeConfig(judge=JudgeConfig(rubric="customer-support"), gates=("adequacy",))
    service = GateService(config, ScriptedEngine(good, max_model_len=3770))  # customer-support fits, legal-review not
    client = TestClient(create_app(service, config))
    item = {"id": "q0", "question": "Who?", "response": "Ada.", "chunks": [{"id": "c0", "text": "Ada wrote it."}]}
    response = client.post("/v1/judge/adequacy?rubric=legal-review", json=item)
    print(response.status_code, response.json())
    assert response.status_code != 500


# -- 5. the hint for a compressed JSON array is a jq command that cannot read it ---------
def test_the_hint_for_a_compressed_json_array_decompresses_first(tmp_path):
    from suffice.batch.inputs import InputFile
    from suffice.exceptions import ConfigError

    source = tmp_path / "in.json.gz"
    source.write_bytes(gzip.compress(json.dumps([record(0), record(1)]).encode()))
    with pytest.raises(ConfigError) as caught:
        InputFile(source)
    assert "gzip -dc in.json.gz | jq -c '.[]'" in str(caught.value)
