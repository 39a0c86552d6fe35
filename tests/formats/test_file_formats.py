"""File formats are plug-ins: one registry, built-in ones a module each, others one entry point each."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import suffice
from suffice.audit.log import export_lines
from suffice.batch import BatchOptions, InputFile
from suffice.cli.main import main
from suffice.exceptions import EXIT_ITEM_ERRORS, EXIT_OK, EXIT_USAGE, ConfigError
from suffice.formats.files import RowLines, file_format_names, file_format_of
from suffice.judge import Judge
from tests.batch.test_runner import good, record
from tests.fakes import ScriptedEngine

BUILT_IN = ("jsonl", "parquet")


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> ScriptedEngine:
    scripted = ScriptedEngine(good)
    monkeypatch.setattr(Judge, "open", classmethod(lambda cls, config: cls(scripted, config=config)))
    return scripted


def test_the_built_in_formats_are_found_in_their_modules():
    assert file_format_names() == BUILT_IN


def test_a_format_is_read_from_the_extension_a_compressed_one_too(tmp_path: Path):
    assert file_format_of(tmp_path / "x.pq", None).name == "parquet"
    assert file_format_of(tmp_path / "x.ndjson.gz", None).name == "jsonl"
    with pytest.raises(ConfigError, match="cannot tell the format"):
        file_format_of(tmp_path / "x.jarr", None)


def test_an_unknown_format_is_refused_naming_the_option_and_the_formats():
    with pytest.raises(ConfigError, match="must be one of jsonl, parquet") as caught:
        BatchOptions(output_format="csv")
    assert caught.value.parameter == "output_format"


def test_no_file_format_name_is_written_outside_its_own_module():
    """The CLI's choices and every check read the registry."""
    root = Path(suffice.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = "/".join(path.relative_to(root).parts)
        if relative.startswith("formats/files/") or relative == "serving/extras.py":  # suffice[parquet], an extra
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in (*BUILT_IN, "csv"):
                found.append((relative, node.lineno, node.value))
    assert found == []


def test_a_format_offers_the_roles_it_has_each_command_lists_those_of_its_own():
    """CSV streams rows (``suffice audit export``) but is neither read nor written by a batch run."""
    assert file_format_names(RowLines) == ("csv", "jsonl")
    with pytest.raises(ConfigError, match="must be one of jsonl, parquet") as caught:
        BatchOptions(input_format="csv")
    assert caught.value.parameter == "input_format"
    lines = list(export_lines([{"seq": 1, "reviews": []}], "csv"))
    assert lines[0].startswith(b"seq,") and lines[1].endswith(b",[]\r\n")


# A format from outside: one module (tests/formats/outside.py) and one entry point (conftest.py).


def test_a_format_from_an_entry_point_is_registered_and_read_by_its_extension(outside_formats: Path, tmp_path: Path):
    assert file_format_names() == (*BUILT_IN, "json-array")
    source = tmp_path / "in.jarr"
    source.write_text(json.dumps([record(0), {"id": "no-question"}]))
    assert InputFile(source).count == 2
    assert [line.line for line in InputFile(source)] == [1, 2]


def test_suffice_judge_reads_writes_and_resumes_it(outside_formats: Path, engine: ScriptedEngine, tmp_path: Path):
    source, out = tmp_path / "in.jarr", tmp_path / "out.jarr"
    source.write_text(json.dumps([record(0), {"id": "no-question"}]))
    code = main(["judge", str(source), "-o", str(out), "--no-progress"])
    assert code == EXIT_ITEM_ERRORS
    rows = json.loads(out.read_text())
    assert [(row["id"], row["line"], row["error"] is None) for row in rows] == [
        ("r0", 1, True),
        ("no-question", 2, False),
    ]
    assert not (tmp_path / "out.jarr.journal.jsonl").exists()
    judged = len(engine.calls)
    source.write_text(json.dumps([record(0), {"id": "no-question"}, record(2)]))
    main(["judge", str(source), "-o", str(out), "--no-progress"])
    assert [row["id"] for row in json.loads(out.read_text())] == ["r0", "no-question", "r2"]
    assert len(engine.calls) == judged + 1  # only the new record


def test_its_name_is_a_choice_of_both_flags(outside_formats: Path, engine: ScriptedEngine, tmp_path: Path):
    source, out = tmp_path / "in.data", tmp_path / "out.data"
    source.write_text(json.dumps([record(0)]))
    args = ["judge", str(source), "-o", str(out), "--no-progress"]
    assert main([*args, "--input-format", "json-array", "--output-format", "json-array"]) == EXIT_OK
    assert json.loads(out.read_text())[0]["verdict"]["is_sufficient"] is True


def test_without_its_entry_point_it_is_a_usage_error(tmp_path: Path):
    source = tmp_path / "in.data"
    source.write_text("[]")
    with pytest.raises(SystemExit) as caught:  # argparse's choices
        main(["judge", str(source), "-o", str(tmp_path / "o.jsonl"), "--input-format", "json-array"])
    assert caught.value.code == EXIT_USAGE
