"""Settings declared once (suffice.settings): what is derived from a declaration, and docs/settings.md read from it.

The fixture ``Extended`` adds one engine option the way a new one is added: one field in the config, nothing
else; its flag, check, engine rule, in-process rule, vLLM keyword, resume record and table row follow.
``ExtendedJudge`` adds a judge setting a request may set: its flag, variable, TOML key, HTTP parameter and OpenAPI
entry follow."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from suffice.batch.options import BatchOptions
from suffice.cli.engine_args import add_engine_args, engine_config_from_args
from suffice.cli.judge_cmd import IN_PROCESS
from suffice.config import JudgeConfig
from suffice.exceptions import ConfigError
from suffice.gates import gate_class, gate_names
from suffice.gates.sufficiency.gate import SufficiencyOptions
from suffice.server.config import ServeConfig
from suffice.serving import machine
from suffice.serving.engine_config import EngineConfig
from suffice.settings import Declared, check, declared, in_process_flags, per_request, setting, table, tagged

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Extended(EngineConfig):
    swap_space_gib: float | None = setting(
        None,
        "GPU build only: CPU swap space per GPU in GiB",
        minimum=0,
        maximum=1024,
        engines=("vllm",),
        instead="only an in-process vLLM engine swaps",
        build="gpu",
        in_process=True,
        verdict=True,
        vllm="swap_space",
    )


def _parse(*argv: str, config: type[EngineConfig] = Extended) -> EngineConfig:
    parser = argparse.ArgumentParser()
    add_engine_args(parser, config=config)
    return engine_config_from_args(parser.parse_args(list(argv)), config=config)


def test_a_new_engine_option_gets_its_flag_from_its_field():
    assert _parse("--swap-space-gib", "4").swap_space_gib == 4.0  # type: ignore[attr-defined]
    assert _parse().swap_space_gib is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["-1", "2000", "nan"])
def test_a_new_engine_option_is_checked_by_its_bounds(value: str):
    with pytest.raises(ConfigError, match=r"swap_space_gib=.*: must be between 0 and 1024") as caught:
        _parse("--swap-space-gib", value)
    assert caught.value.parameter == "swap_space_gib"


def test_a_new_engine_option_is_refused_by_an_engine_that_does_not_take_it():
    with pytest.raises(ConfigError, match="not used by the transformers engine: only an in-process vLLM engine swaps"):
        Extended(kind="transformers", swap_space_gib=4)


def test_a_new_engine_option_is_passed_to_vllm_recorded_for_resume_and_refused_off_its_build():
    config = Extended(swap_space_gib=4)
    assert config.vllm_kwargs()["swap_space"] == 4
    assert "swap_space" not in Extended().vllm_kwargs()
    assert config.recorded({})["swap_space_gib"] == "4.0"
    assert "swap_space_gib" not in Extended().recorded({})
    assert ("swap_space_gib", "--swap-space-gib") in in_process_flags(Extended)
    with pytest.raises(ConfigError, match="needs vLLM's GPU build") as caught:
        machine.check_build(config, gpu=False)
    assert caught.value.parameter == "swap_space_gib"


def test_a_new_engine_option_has_its_row_in_the_table():
    row = next(line for line in table(Extended).splitlines() if line.startswith("| `swap_space_gib`"))
    assert "`--swap-space-gib` `SUFFICE_SWAP_SPACE_GIB` `swap_space_gib`" in row
    assert "between 0 and 1024" in row
    assert "in-process, verdict, gpu build" in row


def test_every_engine_setting_with_a_flag_that_sets_this_process_is_refused_with_server():
    flags = {flag for _, flag in IN_PROCESS}
    for d in tagged(EngineConfig, in_process=True):
        assert d.flag in flags
    assert "--verbose" not in flags and "--api-key-file" not in flags


def test_every_verdict_setting_set_is_in_what_a_resume_checks():
    from suffice.serving.factory import engine_settings

    samples = {"vllm": EngineConfig(tensor_parallel_size=2, max_model_len=4096, backend="outlines")}
    samples["openai"] = EngineConfig(kind="openai", base_url="http://127.0.0.1:9", served_model="m")
    recorded = {kind: EngineConfig.recorded(config, {}) for kind, config in samples.items()}
    assert recorded["vllm"]["tensor_parallel_size"] == "2"
    assert recorded["openai"] == {"engine": "openai", "weights": "http://127.0.0.1:9", "model": "m"}
    assert engine_settings(samples["openai"])["model"] == "m"


def test_every_flag_setting_has_help_and_a_type():
    for d in declared(EngineConfig):
        assert d.spec.help, d.name
        assert d.type in (str, int, float, bool, Path), d.name


def test_the_settings_doc_is_the_code():
    spec = importlib.util.spec_from_file_location("settings_table", ROOT / "scripts" / "settings_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "settings.md").read_text(encoding="utf-8") == module.render(), (
        "docs/settings.md differs from the code: run `PYTHONPATH=. python scripts/settings_table.py`"
    )


def test_a_whole_number_for_a_float_setting_is_held_as_a_float():
    """auto_margin is recorded beside an output with repr: 0 and 0.0 must not make two runs differ."""
    from suffice.config import JudgeConfig

    assert repr(JudgeConfig(detail="auto", auto_margin=0).auto_margin) == "0.0"
    assert isinstance(EngineConfig(gpu_memory_utilization=1).gpu_memory_utilization, float)


@pytest.mark.parametrize("value", [True, "0.2", None])
def test_a_value_of_the_wrong_type_is_refused_naming_the_setting(value: object):
    from suffice.config import JudgeConfig

    with pytest.raises(ConfigError) as caught:
        JudgeConfig(auto_margin=value)  # type: ignore[arg-type]
    assert caught.value.parameter == "auto_margin"


# A judge-level setting a request may set: declared once, it is a flag, a variable, a TOML key, an HTTP parameter
# and an OpenAPI entry, with the bounds and text of its declaration.


@dataclass(frozen=True)
class ExtendedJudge(JudgeConfig):
    min_shown_chunks: int = setting(
        1, "chunks a prompt shows at least", minimum=1, maximum=64, verdict=True, per_request=True
    )


def _served(judge: JudgeConfig) -> Any:
    from fastapi.testclient import TestClient

    from suffice.server.app import create_app
    from suffice.server.config import ServeConfig
    from suffice.server.service import GateService
    from tests.batch.test_runner import good
    from tests.fakes import ScriptedEngine

    config = ServeConfig(judge=judge, gates=("sufficiency", "recovery"))
    return TestClient(create_app(GateService(config, ScriptedEngine(good)), config, None), base_url="http://127.0.0.1")


ITEM = {"id": "q", "question": "Who wrote it?", "chunks": [{"id": "c0", "text": "Ada wrote it."}]}


def _bounds(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's JSON Schema keywords that a declaration decides."""
    keys = ("type", "enum", "minimum", "exclusiveMinimum", "maximum", "default", "description")
    return {key: entry[key] for key in keys if key in entry}


def _declared_bounds(d: Declared) -> dict[str, Any]:
    s = d.spec
    expected: dict[str, Any] = {"type": {int: "integer", float: "number", str: "string"}[d.type]}
    if d.choices is not None:
        expected["enum"] = list(d.choices)
    for key, bound in (("minimum", s.minimum), ("exclusiveMinimum", s.above), ("maximum", s.maximum)):
        if bound is not None:
            expected[key] = bound
    return {**expected, "default": d.default, "description": s.help}


def test_a_new_judge_setting_is_a_flag_a_variable_and_a_toml_key(tmp_path: Path):
    from suffice.cli.judge_cmd import add_judge_settings, judge_settings_from_args
    from suffice.cli.serve_settings import SettingSources

    parser = argparse.ArgumentParser()
    add_judge_settings(parser, ExtendedJudge)
    settings = SettingSources(parser, "judge")
    file = tmp_path / "s.toml"
    file.write_text("min_shown_chunks = 5\n", encoding="utf-8")
    for argv, environ, want in (
        (["--min-shown-chunks", "3"], {"SUFFICE_MIN_SHOWN_CHUNKS": "4"}, 3),
        (["--config", str(file)], {"SUFFICE_MIN_SHOWN_CHUNKS": "4"}, 4),
        (["--config", str(file)], {}, 5),
        ([], {}, 1),
    ):
        args = parser.parse_args(argv)
        settings.resolve(args, environ)
        assert ExtendedJudge(**judge_settings_from_args(args, ExtendedJudge)).min_shown_chunks == want  # type: ignore[attr-defined]
    args = parser.parse_args([])
    settings.resolve(args, {"SUFFICE_MIN_SHOWN_CHUNKS": "65"})
    with pytest.raises(ConfigError, match="must be between 1 and 64") as caught:
        judge_settings_from_args(args, ExtendedJudge)
    assert caught.value.parameter == "min_shown_chunks"
    assert "`--min-shown-chunks` `SUFFICE_MIN_SHOWN_CHUNKS` `min_shown_chunks`; per request: `?min_shown_chunks=`" in (
        table(ExtendedJudge)
    )


def test_a_new_judge_setting_is_an_http_parameter_and_an_openapi_entry():
    client = _served(ExtendedJudge())
    spec = client.get("/openapi.json").json()
    [parameter] = [
        p for p in spec["paths"]["/v1/judge/recovery"]["post"]["parameters"] if p["name"] == "min_shown_chunks"
    ]
    [d] = [d for d in declared(ExtendedJudge) if d.name == "min_shown_chunks"]
    assert _bounds(parameter["schema"]) == _declared_bounds(d)
    assert parameter["description"] == d.spec.help
    body = spec["components"]["schemas"]["SufficiencyOptions"]["properties"]["min_shown_chunks"]
    assert _bounds(body) == _declared_bounds(d)
    assert client.post("/v1/judge/sufficiency?min_shown_chunks=3", json=[ITEM]).status_code == 200
    answer = client.post("/v1/judge/sufficiency", json={"items": [ITEM], "options": {"min_shown_chunks": 65}})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "options", "min_shown_chunks"]
    assert "must be between 1 and 64" in answer.json()["detail"][0]["msg"]
    settings = client.get("/v1/settings/sufficiency?min_shown_chunks=3").json()["settings"]
    assert settings["min_shown_chunks"] == "3"
    assert "min_shown_chunks" not in client.get("/v1/settings/sufficiency").json()["settings"]
    # Not a setting of the plain config: refused there, naming it.
    plain = _served(JudgeConfig()).post("/v1/judge/sufficiency?min_shown_chunks=3", json=[ITEM])
    assert plain.status_code == 422 and plain.json()["detail"][0]["loc"] == ["query", "min_shown_chunks"]


def test_the_openapi_entries_of_the_judge_settings_are_their_declarations():
    spec = _served(JudgeConfig()).get("/openapi.json").json()
    settable = per_request(JudgeConfig)
    assert {d.name for d in settable} >= {"auto_margin", "max_chunks", "max_question_tokens"}
    for gate in ("sufficiency", "recovery"):
        parameters = {p["name"]: p for p in spec["paths"][f"/v1/judge/{gate}"]["post"]["parameters"]}
        options = spec["components"]["schemas"][f"{gate.capitalize()}Options"]["properties"]
        for d in settable:
            assert _bounds(parameters[d.name]["schema"]) == _declared_bounds(d), (gate, d.name)
            assert parameters[d.name]["description"] == d.spec.help
            assert _bounds(options[d.name]) == _declared_bounds(d), (gate, d.name)


@pytest.mark.parametrize("gate", ["sufficiency", "recovery", "adequacy"])
def test_suffice_schema_request_prints_the_declarations(gate: str, capsys: pytest.CaptureFixture[str]):
    from suffice.cli.main import main
    from suffice.gates import gate_class

    assert main(["schema", "--gate", gate, "--request"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["additionalProperties"] is False
    for d in per_request(JudgeConfig):
        assert _bounds(schema["properties"][d.name]) == _declared_bounds(d), d.name
    assert set(schema["properties"]) == {d.name for d in per_request(JudgeConfig)} | {
        d.name for d in per_request(gate_class(gate).options_model)
    }


def test_suffice_schema_detail_is_the_declared_one():
    from suffice.cli.schema_cmd import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    [detail] = [d for d in declared(JudgeConfig) if d.name == "detail"]
    action = next(
        a
        for sub in parser._subparsers._group_actions[0].choices.values()
        for a in sub._actions
        if a.dest == "detail"  # type: ignore[union-attr]
    )
    assert tuple(action.choices) == detail.choices and action.default is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "named", "reason"),
    [
        ("max_chunks=0", "max_chunks", "must be between 1 and 512"),
        ("auto_margin=0.7", "auto_margin", "must be between 0 and 0.5"),
        ("auto_margin=wide", "auto_margin", "must be a number"),
        ("max_question_tokens=1.5", "max_question_tokens", "must be a whole number"),
    ],
)
def test_a_judge_setting_a_request_gets_wrong_is_a_422_naming_it(query: str, named: str, reason: str):
    answer = _served(JudgeConfig()).post(f"/v1/judge/sufficiency?{query}", json=[ITEM])
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == ["query", named] and reason in error["msg"]


def test_a_budget_whose_prompt_cannot_fit_the_window_is_a_422_naming_it_not_the_servers_window():
    answer = _served(JudgeConfig()).post("/v1/judge/sufficiency?min_chunk_tokens=100000", json=[ITEM])
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == ["query", "min_chunk_tokens"] and "does not fit" in error["msg"]


def test_a_judge_setting_a_request_sets_is_its_settings_and_judges():
    assert (
        _served(JudgeConfig()).post("/v1/judge/sufficiency?auto_margin=0.3&max_chunks=8", json=[ITEM]).status_code
        == 200
    )
    client = _served(JudgeConfig(detail="auto"))
    settings = client.get("/v1/settings/sufficiency?auto_margin=0.3").json()["settings"]
    assert settings["auto_margin"] == "0.3" and settings["detail"] == "auto"
    ready = client.get("/ready").json()
    # the gate's own per-request options beside the judge's settings
    gates_own = {d.name for d in per_request(SufficiencyOptions)}
    assert set(ready["options"]["sufficiency"]) == {d.name for d in per_request(JudgeConfig)} | gates_own


# The command-line settings of judge, calibrate and serve: declared, so checked wherever their value came from.


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (["calibrate", "G", "-o", "R", "--beta", "0"], {}, "beta=0.0: must be more than 0"),
        (["calibrate", "G", "-o", "R", "--fp-cost", "-1"], {}, "fp_cost=-1.0: must be at least 0"),
        (["calibrate", "G", "-o", "R", "--limit", "-2"], {}, "limit=-2: must be at least 0"),
        (["calibrate", "G", "-o", "R"], {"SUFFICE_PRECISION_TARGET": "0"}, "SUFFICE_PRECISION_TARGET=0.0"),
        (["judge", "IN", "-o", "OUT", "--timeout", "0"], {}, "timeout=0.0: must be more than 0 seconds"),
        (["judge", "IN", "-o", "OUT"], {"SUFFICE_VERDICT_CACHE_MIB": "0"}, "SUFFICE_VERDICT_CACHE_MIB=0: must be at"),
        (
            ["judge", "IN", "-o", "OUT", "--verdict-cache", "c", "--no-verdict-cache"],
            {},
            "--no-verdict-cache and --verdict-cache PATH contradict",
        ),
    ],
)
def test_a_command_line_setting_out_of_its_bounds_is_a_usage_error_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    environ: dict[str, str],
    named: str,
):
    from suffice.cli.main import main
    from suffice.exceptions import EXIT_USAGE

    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(ITEM) + "\n", encoding="utf-8")
    places = {"G": str(source), "IN": str(source), "R": str(tmp_path / "r"), "OUT": str(tmp_path / "out.jsonl")}
    for variable, text in environ.items():
        monkeypatch.setenv(variable, text)
    assert main([places.get(a, a) for a in argv]) == EXIT_USAGE
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_every_command_line_setting_has_its_flag_on_its_commands():
    """Nothing declared is left off a command, and the declared flags keep their names."""
    from suffice.audit.options import AuditOptions
    from suffice.batch.options import BatchOptions
    from suffice.cli.cache_cmd import CacheSettings
    from suffice.cli.calibrate_cmd import CalibrateSettings
    from suffice.cli.judge_cmd import JudgeSettings
    from suffice.cli.main import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    flags = {name: {o for a in p._actions for o in a.option_strings} for name, p in commands.items()}
    wanted = {
        "judge": (JudgeSettings, BatchOptions, CacheSettings, JudgeConfig),
        "calibrate": (CalibrateSettings, AuditOptions, CacheSettings, JudgeConfig),
        "serve": (AuditOptions, CacheSettings, JudgeConfig, ServeConfig),
    }
    for command, classes in wanted.items():
        for cls in classes:
            for d in declared(cls):
                if d.flag is None or (cls is JudgeSettings and command != "judge"):
                    continue
                assert set(d.spellings) <= flags[command], (command, d.name)
    assert {"--verdict-cache", "--no-verdict-cache", "--audit-db", "--format", "--save"} <= (
        flags["judge"] | flags["calibrate"]
    )


def test_a_repeated_setting_is_a_repeatable_flag_a_list_variable_and_a_tuple():
    from suffice.cli.main import build_parser
    from suffice.cli.serve_cmd import config_from_args

    args = build_parser().parse_args(["serve", "--allowed-host", "A.example", "--allowed-host", "b.example"])
    assert config_from_args(args, {}).allowed_hosts == ("a.example", "b.example")
    args = build_parser().parse_args(["serve"])
    assert config_from_args(args, {"SUFFICE_ALLOWED_HOST": "a.example, c.example"}).allowed_hosts == (
        "a.example",
        "c.example",
    )
    [d] = [d for d in declared(ServeConfig) if d.name == "allowed_hosts"]
    assert d.repeated and d.type is str
    with pytest.raises(ConfigError, match="must be a list of str") as caught:
        ServeConfig(allowed_hosts="a.example")  # type: ignore[arg-type]
    assert caught.value.parameter == "allowed_hosts"


@dataclass(frozen=True)
class _Command:
    """A command's settings of every shape: an argument, a required flag, a flag with a value-less spelling."""

    source: Path | None = setting(None, "what to read", positional=True)
    output: Path | None = setting(None, "what to write", also=("-o",), required=True)
    save: Path | None = setting(None, "where to save", const=Path())
    count: int = setting(1, "how many", minimum=1)

    def __post_init__(self) -> None:
        check(self)


def test_an_argument_and_a_required_flag_are_declared_settings_without_a_variable(tmp_path: Path):
    from suffice.cli.serve_settings import SettingSources
    from suffice.settings import add_flags, from_args

    parser = argparse.ArgumentParser()
    add_flags(parser, _Command)
    settings = SettingSources(parser, "x")
    assert set(settings.settings) == {"save", "count"}  # an argument and a required flag: not settings
    args = parser.parse_args(["in.jsonl", "-o", "out", "--save", "--count", "2"])
    settings.resolve(args, {"SUFFICE_COUNT": "5", "SUFFICE_SAVE": "f"})
    assert from_args(_Command, args) == _Command(Path("in.jsonl"), Path("out"), Path(), 2)
    assert parser.parse_args(["i", "--output", "o", "--save", "p"]).save == Path("p")
    with pytest.raises(SystemExit):
        parser.parse_args(["i"])  # -o is required
    with pytest.raises(ConfigError, match="count=0: must be at least 1"):
        from_args(_Command, parser.parse_args(["i", "-o", "o", "--count", "0"]))
    rows = {line.split(" | ")[0]: line for line in table(_Command).splitlines()}
    assert "| argument `SOURCE` | Path | required |" in rows["| `source`"]
    assert "| `--output` (required) | Path | required |" in rows["| `output`"]
    assert "SUFFICE_SAVE" in rows["| `save`"]
    assert "SUFFICE_COUNT" not in table(_Command, environment=False)


def test_every_commands_declared_settings_are_its_flags():
    """Each command's flags and arguments are those its declarations give, spelled as declared."""
    from suffice.cli.audit_cmd import AuditCommandSettings
    from suffice.cli.bundle_cmd import BundleSettings
    from suffice.cli.cache_cmd import CacheCommandSettings
    from suffice.cli.demo_cmd import DemoSettings
    from suffice.cli.main import build_parser
    from suffice.cli.models_cmd import ModelsSettings
    from suffice.cli.review_cmd import ReviewSettings
    from suffice.cli.schema_cmd import SchemaSettings
    from suffice.cli.serve_cmd import ServeSettings

    def sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        found: argparse.ArgumentParser = action.choices[name]
        return found

    root = build_parser()
    wanted = {
        ("serve",): {ServeSettings: None},
        ("schema",): {SchemaSettings: None},
        ("demo",): {DemoSettings: None},
        ("cache",): {CacheCommandSettings: None},
        ("bundle",): {BundleSettings: None},
        ("models", "verify"): {ModelsSettings: None},
        ("audit", "verify"): {AuditCommandSettings: ("db", "audit_key", "expect_keyed", "anchor_file")},
        ("audit", "export"): {AuditCommandSettings: ("db", "since", "until", "export_format", "export_output")},
        ("review", "decide"): {ReviewSettings: ("id", "decision", "label", "by", "note", "answer", "query", "db")},
        ("review", "export"): {ReviewSettings: ("labels", "gate", "db")},
    }
    for path, classes in wanted.items():
        parser = root
        for name in path:
            parser = sub(parser, name)
        by_dest = {a.dest: a for a in parser._actions}
        for cls, only in classes.items():
            for d in declared(cls):
                if only is not None and d.name not in only:
                    continue
                action = by_dest[d.dest]
                if d.spec.positional:
                    assert not action.option_strings, (path, d.name)
                else:
                    assert set(d.spellings) <= set(action.option_strings), (path, d.name)
                    assert action.required == d.spec.required, (path, d.name)


@dataclass(frozen=True)
class ExtendedBatch(BatchOptions):
    stop_after: int | None = setting(None, "stop after N records", minimum=1, metavar="N")


def test_a_new_batch_setting_is_a_judge_flag_a_variable_and_a_table_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suffice.cli import judge_cmd
    from suffice.cli.main import build_parser, main

    monkeypatch.setattr(judge_cmd, "BatchOptions", ExtendedBatch)
    judge = build_parser()._subparsers._group_actions[0].choices["judge"]  # type: ignore[union-attr]
    assert "--stop-after N" in judge.format_help()
    given: list[BatchOptions] = []
    monkeypatch.setattr(judge_cmd, "judge_file", lambda config, source, output, options, **_: given.append(options))
    monkeypatch.setenv("SUFFICE_STOP_AFTER", "5")
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(ITEM) + "\n", encoding="utf-8")
    main(["judge", str(source), "-o", str(tmp_path / "out.jsonl")])
    assert [options.stop_after for options in given] == [5]  # type: ignore[attr-defined]
    assert "| `stop_after` | `--stop-after` `SUFFICE_STOP_AFTER` `stop_after` | int or none |" in table(ExtendedBatch)


def _docs_flags_and_variables() -> tuple[set[str], set[str]]:
    """The flags and variables docs/settings.md names in its tables (their second column) and the notes above them
    (`serve`'s `--engine-key-file`)."""
    lines = (ROOT / "docs" / "settings.md").read_text().split("\n## ", 1)[1].splitlines()
    texts = [line.split(" | ")[1] if line[:3] == "| `" else line for line in lines if line[:1] in "`|"]
    words = {word for text in texts for word in re.findall(r"`(--[a-z][a-z0-9-]*|SUFFICE_[A-Z0-9_]+)`", text)}
    return {w for w in words if w.startswith("--")}, {w for w in words if w.startswith("SUFFICE_")}


def test_the_settings_doc_names_every_flag_and_variable_the_commands_take_and_no_other():
    from suffice.cli.main import build_parser

    def options(gates: tuple[str, ...]) -> set[str]:
        return {f"gate_option_{d.name}" for name in gates for d in declared(gate_class(name).options_model)}

    others = options(gate_names()) - options(("sufficiency", "recovery", "adequacy"))
    flags: set[str] = set()
    variables: set[str] = set()
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
            elif action.dest in ("help", "version", "config") or action.dest in others:
                continue  # --config is the table's subject; another package's gate documents its own options
            flags |= {o for o in action.option_strings if o.startswith("--")}
        sources = parser.get_default("command_settings")
        if sources is not None:
            variables |= {s.variable for s in sources.settings.values() if s.dest not in others}
    documented = _docs_flags_and_variables()
    assert (documented[0] - flags, flags - documented[0]) == (set(), set())
    assert (documented[1] - variables, variables - documented[1]) == (set(), set())


# A gate's own option, declared once on its options class (``per_request`` a tag like any setting's): it is a
# flag, a variable, a TOML key, a Python option, an HTTP parameter, an OpenAPI entry, a recorded setting and a row
# of the docs' table, with the bounds and text of its declaration.


@dataclass(frozen=True)
class ExtendedSufficiency(SufficiencyOptions):
    min_overlap: int = setting(2, "words a chunk shares with the question at least", minimum=1, maximum=9)
    max_hops: int = setting(3, "reasoning hops the model may take", minimum=1, maximum=8, per_request=True)


@pytest.fixture
def extended_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    from suffice.gates.sufficiency.gate import SufficiencyGate

    monkeypatch.setattr(SufficiencyGate, "options_model", ExtendedSufficiency)


@pytest.mark.usefixtures("extended_gate")
def test_a_new_gate_option_is_a_flag_a_variable_a_toml_key_and_a_python_option(tmp_path: Path):
    from suffice.cli.gate_args import add_gate_args, gate_options_from_args
    from suffice.cli.serve_settings import SettingSources

    parser = argparse.ArgumentParser()
    add_gate_args(parser)
    assert "--min-overlap" in parser.format_help() and "--max-hops" in parser.format_help()
    settings = SettingSources(parser, "judge")
    file = tmp_path / "s.toml"
    file.write_text("min_overlap = 5\n", encoding="utf-8")
    for argv, environ, want in (
        (["--min-overlap", "3"], {"SUFFICE_MIN_OVERLAP": "4"}, 3),
        (["--config", str(file)], {"SUFFICE_MIN_OVERLAP": "4"}, 4),
        (["--config", str(file)], {}, 5),
        (["--gate-option", "min_overlap=6"], {}, 6),
        ([], {}, 2),
    ):
        args = parser.parse_args(argv)
        settings.resolve(args, environ)
        config = JudgeConfig(gate="sufficiency", options=gate_options_from_args(args))
        gate = config.make_gate()
        assert gate.options.min_overlap == want  # type: ignore[attr-defined]
        assert gate.settings().get("min_overlap") == (None if want == 2 else str(want))  # recorded when set
    with pytest.raises(ConfigError, match="must be between 1 and 9") as caught:
        JudgeConfig(gate="sufficiency", options={"min_overlap": "10"})
    assert caught.value.parameter == "min_overlap"
    rows = table(ExtendedSufficiency)
    assert (
        "| `min_overlap` | `--min-overlap` `SUFFICE_MIN_OVERLAP` `min_overlap` | int | `2` | between 1 and 9 |" in rows
    )
    assert "`--max-hops` `SUFFICE_MAX_HOPS` `max_hops`; per request: `?max_hops=`" in rows


@pytest.mark.usefixtures("extended_gate")
def test_a_new_per_request_gate_option_is_an_http_parameter_and_an_openapi_entry_and_the_others_are_not():
    client = _served(JudgeConfig())
    spec = client.get("/openapi.json").json()
    names = [p["name"] for p in spec["paths"]["/v1/judge/sufficiency"]["post"]["parameters"]]
    assert "max_hops" in names and "min_overlap" not in names
    [d] = [d for d in declared(ExtendedSufficiency) if d.name == "max_hops"]
    body = spec["components"]["schemas"]["SufficiencyOptions"]["properties"]
    assert _bounds(body["max_hops"]) == _declared_bounds(d) and "min_overlap" not in body
    assert client.post("/v1/judge/sufficiency?max_hops=5", json=[ITEM]).status_code == 200
    assert client.get("/v1/settings/sufficiency?max_hops=5").json()["settings"]["max_hops"] == "5"
    answer = client.post("/v1/judge/sufficiency", json={"items": [ITEM], "options": {"max_hops": 9}})
    assert answer.status_code == 422 and "must be between 1 and 8" in answer.json()["detail"][0]["msg"]
    refused = client.post("/v1/judge/sufficiency?min_overlap=3", json=[ITEM])
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "min_overlap"]
