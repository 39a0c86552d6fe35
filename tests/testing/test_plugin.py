"""The pytest plugin as a team uses it: pytester runs a small test file that asserts with suffice's helpers.

Against a scripted engine (the service's real app on loopback, and an in-process judge a conftest.py puts in
place) the messages are checked word for word: a failing assertion names what the verdict says is missing or
unsupported, and every verdict is a property in the JUnit XML report.  Once against the real engine, through
the session's ``suffice serve``: whatever the small model decides, the test's outcome and its message follow
its verdict.  A judge that cannot answer (a service down, a wrong key, a bad record, an install without the
engine) is a test error, not a failure, in one message saying what to fix.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from suffice import Client, ConfigError, InputError, Judge
from suffice.batch.inputs import InputFile
from suffice.serving.base import GenerationRequest
from suffice.testing import agreement, assert_agreement, assert_sufficient, judge_records
from tests.fakes import ScriptedEngine, recovery_reply
from tests.test_client import KEY, serve

pytest_plugins = ["pytester"]

MISSING = "the launch date"
UNSUPPORTED = "It launched in 1969."
RESPONSE = "Apollo 11 landed on the Moon. " + UNSUPPORTED


def _first_matching(request: GenerationRequest, candidates: list[dict[str, object]]) -> str:
    for candidate in candidates:
        text = json.dumps(candidate, separators=(",", ":"))
        if request.constraint.matches(text):
            return text
    raise AssertionError("no scripted verdict fits this request's constraint")


def verdict_for(request: GenerationRequest) -> str:
    """Sufficient (or SUFFICIENT) unless the question says ``unknown``; the gate is the one whose constraint
    the text fits."""
    bad = "unknown" in request.messages[-1]["content"]
    sufficiency = {
        "required_entities": [{"entity": "Apollo", "covered": not bad}],
        "contradictions": [],
        "reasoning": "No chunk gives the date." if bad else "Chunk 0 answers.",
        "is_sufficient": not bad,
        "missing_information": [MISSING] if bad else [],
        "confidence": 0.9,
        "useful_chunk_ids": [] if bad else [0],
    }
    if request.constraint.key.startswith("recovery/"):
        # Both claims of the response supported by both chunks; with ``unknown``, the second unsupported.
        return recovery_reply(
            request,
            lambda index, text: "unsupported" if bad and text == UNSUPPORTED else ("supported", [0, 1]),
            notice="No passage gives the year.",
            queries=["Apollo 11 launch year"],
        )
    return _first_matching(request, [sufficiency])


def record(question: str, rid: str = "r1", **extra: object) -> dict[str, object]:
    chunks = [{"id": 0, "text": "Apollo 11 landed on the Moon."}, {"id": 1, "text": "It carried three astronauts."}]
    return {"id": rid, "question": question, "chunks": chunks, "response": RESPONSE, **extra}


TEAM_TESTS = f"""
import json

GOOD = json.loads({json.dumps(json.dumps(record("Where did Apollo 11 land?", "good")))})
BAD = json.loads({json.dumps(json.dumps(record("When was the unknown launch?", "bad")))})


def test_sufficient_passes(suffice_gate):
    suffice_gate.assert_sufficient(GOOD)


def test_sufficient_fails(suffice_gate):
    suffice_gate.assert_sufficient(BAD)


def test_insufficient_passes(suffice_gate):
    suffice_gate.assert_insufficient(BAD)


def test_insufficient_fails(suffice_gate):
    suffice_gate.assert_insufficient(GOOD)


def test_supported_passes(suffice_gate):
    suffice_gate.assert_supported(GOOD)


def test_supported_fails(suffice_gate):
    suffice_gate.assert_supported(BAD)


def test_agreement_holds(suffice_gate):
    suffice_gate.assert_agreement("labeled.jsonl", min_precision=1.0, min_recall=0.6)


def test_agreement_drops(suffice_gate):
    suffice_gate.assert_agreement("labeled.jsonl", min_agreement=0.9)
"""

EXPECTED = {
    "test_sufficient_passes": "passed",
    "test_sufficient_fails": "failed",
    "test_insufficient_passes": "passed",
    "test_insufficient_fails": "failed",
    "test_supported_passes": "passed",
    "test_supported_fails": "failed",
    "test_agreement_holds": "passed",
    "test_agreement_drops": "failed",
}


def _plugin_args() -> list[str]:
    """Load the plugin by name unless its entry point (an install of this tree) already does."""
    installed = any(ep.value == "suffice.testing.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "suffice.testing.plugin"]


def _labeled(pytester: pytest.Pytester) -> None:
    rows = [
        record("Where did Apollo 11 land?", "a", sufficient=True),
        record("Who flew Apollo 11?", "b", sufficient=True),
        record("When was the unknown launch?", "c", sufficient=False),
        # Labeled sufficient, judged insufficient: one disagreement in four.
        record("What was the unknown crew size?", "d", sufficient=True),
        record("Not labeled", "e"),
    ]
    pytester.makefile(".jsonl", labeled="\n".join(json.dumps(r) for r in rows))


def _outcomes(xml: Path) -> dict[str, tuple[str, str, list[tuple[str, str]]]]:
    """Each test case of a JUnit XML report: outcome, failure message, properties."""
    found = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        failure = case.find("failure")
        properties = [(p.get("name", ""), p.get("value", "")) for p in case.iter("property")]
        found[case.get("name", "")] = (
            "failed" if failure is not None else "passed",
            "" if failure is None else failure.get("message", "") + (failure.text or ""),
            properties,
        )
    return found


def _run(pytester: pytest.Pytester, *args: str) -> dict[str, tuple[str, str, list[tuple[str, str]]]]:
    pytester.makepyfile(test_team=TEAM_TESTS)
    _labeled(pytester)
    xml = pytester.path / "report.xml"
    result = pytester.runpytest_subprocess(*_plugin_args(), f"--junitxml={xml}", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=4, failed=4)
    return _outcomes(xml)


def _check_words(found: dict[str, tuple[str, str, list[tuple[str, str]]]]) -> None:
    assert {name: outcome for name, (outcome, _, _) in found.items()} == EXPECTED
    assert f"missing: {MISSING}" in found["test_sufficient_fails"][1]
    assert "not covered: Apollo" in found["test_sufficient_fails"][1]
    assert "was judged sufficient: useful chunks: [0]" in found["test_insufficient_fails"][1]
    assert f"unsupported claims: {UNSUPPORTED}" in found["test_supported_fails"][1]
    message = found["test_agreement_drops"][1]
    assert "agreement 0.750 < 0.900 over 4 labeled records" in message
    assert f"d (labeled True, judged False: missing: {MISSING}" in message


def _check_properties(found: dict[str, tuple[str, str, list[tuple[str, str]]]]) -> None:
    name, value = found["test_sufficient_fails"][2][0]
    assert name == "suffice.sufficiency"
    verdict = json.loads(value)
    assert (verdict["id"], verdict["passed"], verdict["route"]) == ("bad", False, "retrieve_more")
    assert verdict["verdict"]["missing_information"] == [MISSING]
    name, value = found["test_supported_passes"][2][0]
    assert (name, json.loads(value)["passed"]) == ("suffice.recovery", True)
    name, value = found["test_agreement_holds"][2][0]
    assert name == "suffice.sufficiency.agreement"
    assert json.loads(value) | {"path": ""} == {
        "path": "",
        "gate": "sufficiency",
        "label": "sufficient",
        "n": 4,
        "agreement": 0.75,
        "recall": 2 / 3,
        "precision": 1.0,
        "errors": 0,
    }


@pytest.fixture(scope="module", autouse=True)
def scripted_url() -> Iterator[str]:
    """A service of the scripted engine, started and judging once before any test of the module: what serving and
    judging import stays imported (pytester forgets the modules a test imported, and a C extension imported twice
    can crash the process)."""
    with serve(ScriptedEngine(verdict_for), gates=("sufficiency", "recovery")) as url:
        with Client(url) as client:
            client.judge(record("Where did Apollo 11 land?"))
        yield url


def test_through_a_service_the_assertions_fail_in_the_verdicts_words(pytester: pytest.Pytester, scripted_url: str):
    found = _run(pytester, f"--suffice-server={scripted_url}")
    _check_words(found)
    _check_properties(found)


IN_PROCESS_CONFTEST = """
import pytest

from suffice import Judge
from tests.fakes import ScriptedEngine
from tests.testing.test_plugin import verdict_for


@pytest.fixture(scope="session")
def suffice_judge():
    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge:
        yield judge
"""


def test_an_in_process_judge_a_conftest_gives_judges_every_gate(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    pytester.makeconftest(IN_PROCESS_CONFTEST)
    root = str(Path(__file__).resolve().parents[2])  # the conftest imports tests.fakes
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    found = _run(pytester)
    _check_words(found)
    _check_properties(found)


def test_the_options_show_in_pytest_help(pytester: pytest.Pytester):
    result = pytester.runpytest_subprocess(*_plugin_args(), "--help")
    result.stdout.fnmatch_lines(["*--suffice-server=URL*", "*--suffice-api-key-file=PATH*", "*--suffice-model=PATH*"])


def test_a_bound_outside_0_to_1_is_a_config_error_naming_it(tmp_path: Path):
    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge, pytest.raises(ConfigError, match="min_recall"):
        assert_agreement(judge, tmp_path / "x.jsonl", min_recall=1.5)


def test_no_bound_at_all_is_a_config_error(tmp_path: Path):
    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge, pytest.raises(ConfigError, match="min_agreement"):
        assert_agreement(judge, tmp_path / "x.jsonl")


def test_a_label_that_is_not_a_bool_is_an_input_error_naming_the_line(tmp_path: Path):
    path = tmp_path / "labeled.jsonl"
    path.write_text(json.dumps(record("q", sufficient="yes")) + "\n")
    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge, pytest.raises(InputError, match="line 1"):
        agreement(judge, path)


def test_a_file_without_labels_is_an_input_error(tmp_path: Path):
    path = tmp_path / "labeled.jsonl"
    path.write_text(json.dumps(record("q")) + "\n")
    with Judge(ScriptedEngine(verdict_for), "sufficiency") as judge, pytest.raises(InputError, match="no record"):
        agreement(judge, path)


def test_a_judge_of_another_kind_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="judge"):
        judge_records(object(), [record("q")])  # type: ignore[arg-type]


def test_a_failed_generation_is_named_as_no_verdict():
    judge = Judge(ScriptedEngine(lambda request: "not json"), "sufficiency")
    with judge, pytest.raises(AssertionError, match="no verdict: "):
        assert_sufficient(judge, record("Where did Apollo 11 land?"))


RAGAS = {"user_input": "Where did Apollo 11 land?", "retrieved_contexts": ["Apollo 11 landed on the Moon."]}
UNJUDGED_TESTS = f"""
import json

GOOD = json.loads({json.dumps(json.dumps(record("Where did Apollo 11 land?", "good")))})
BAD = json.loads({json.dumps(json.dumps(record("When was the unknown launch?", "bad")))})
RAGAS = json.loads({json.dumps(json.dumps(RAGAS))})


def test_no_id(suffice_gate):
    suffice_gate.assert_sufficient({{k: v for k, v in GOOD.items() if k != "id"}})


def test_ragas_no_id(suffice_gate):
    suffice_gate.assert_sufficient(RAGAS)


def test_no_chunks(suffice_gate):
    suffice_gate.assert_sufficient({{"question": "Where did Apollo 11 land?"}})


def test_not_sufficient(suffice_gate):
    suffice_gate.assert_sufficient(BAD)


def test_bad_labeled_line(suffice_gate):
    suffice_gate.assert_agreement("labeled.jsonl", min_agreement=0.5)
"""


def _errors(result: pytest.RunResult) -> str:
    """The text of the errors section (what a person reads to fix them)."""
    text = result.stdout.str()
    return text[text.index("= ERRORS =") :] if "= ERRORS =" in text else text


def test_a_bad_record_is_an_error_saying_what_to_fix_and_a_record_without_an_id_gets_judges_id(
    pytester: pytest.Pytester, scripted_url: str
):
    pytester.makepyfile(test_team=UNJUDGED_TESTS)
    rows = [record("Where did Apollo 11 land?", "a", sufficient=True), {"question": "no chunks", "sufficient": False}]
    pytester.makefile(".jsonl", labeled="\n\n".join(json.dumps(r) for r in rows))
    xml = pytester.path / "report.xml"
    result = pytester.runpytest_subprocess(*_plugin_args(), f"--junitxml={xml}", f"--suffice-server={scripted_url}")
    result.assert_outcomes(passed=2, failed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*_ ERROR at call of test_no_chunks _*",
            ">*suffice_gate.assert_sufficient(*",
            "E *suffice.exceptions.InputError: record: suffice sufficiency cannot judge 'Where did Apollo 11 land?': "
            "chunks: is missing",
            "*_ ERROR at call of test_bad_labeled_line _*",
            "E *suffice.exceptions.InputError: path: labeled.jsonl line 3 cannot be judged: chunks: is missing",
            "*_ test_not_sufficient _*",
            "E *AssertionError: suffice sufficiency: the context for 'When was the unknown launch?' is not "
            "sufficient: missing: the launch date*",
        ]
    )
    found = _outcomes(xml)
    ragas = json.loads(found["test_ragas_no_id"][2][0][1])
    # The id suffice judge gives the same record on line 1 of a file.
    pytester.makefile(".jsonl", one=json.dumps(RAGAS))
    assert ragas["id"] == next(iter(InputFile(pytester.path / "one.jsonl"))).record["id"]  # type: ignore[index]
    assert json.loads(found["test_no_id"][2][0][1])["id"].startswith("row-1-")


def _unreachable() -> str:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{free.getsockname()[1]}"


@pytest.mark.parametrize(
    ("server", "key", "said"),
    [
        ("down", None, "suffice_judge: cannot reach http://127.0.0.1:*; start suffice serve there, or give its URL *"),
        (
            "keyed",
            "w" * 32,
            "suffice_judge: HTTP 401: *the service refused the key from --suffice-api-key-file: give the *",
        ),
    ],
)
def test_a_service_down_or_a_wrong_key_is_one_error_per_test_saying_what_to_fix(
    pytester: pytest.Pytester, server: str, key: str | None, said: str
):
    pytester.makepyfile(test_team=TEAM_TESTS)
    _labeled(pytester)
    xml = pytester.path / "report.xml"
    key_file = pytester.path / "service.key"
    key_file.write_text(key or "")
    args = [*_plugin_args(), f"--junitxml={xml}", *([f"--suffice-api-key-file={key_file}"] if key else [])]
    if server == "down":
        result = pytester.runpytest_subprocess(*args, f"--suffice-server={_unreachable()}")
    else:
        with serve(ScriptedEngine(verdict_for), key=KEY) as url:
            result = pytester.runpytest_subprocess(*args, f"--suffice-server={url}")
    result.assert_outcomes(errors=len(EXPECTED))
    errors = _errors(result)
    assert "Traceback" not in errors and "suffice/" not in errors, errors
    result.stdout.fnmatch_lines([said])
    assert {case.tag for case in ET.parse(xml).getroot().iter() if case.tag in ("error", "failure")} == {"error"}


CLIENT_ONLY_CONFTEST = """
import importlib.abc, sys

assert not {"vllm", "torch", "numpy"} & set(sys.modules)


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("vllm", "torch", "numpy"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Block())
"""


def test_without_a_server_a_client_only_install_is_one_error_naming_the_extra(pytester: pytest.Pytester):
    pytester.makeconftest(CLIENT_ONLY_CONFTEST)
    pytester.makepyfile(test_team=TEAM_TESTS)
    _labeled(pytester)
    result = pytester.runpytest_subprocess(*_plugin_args())
    result.assert_outcomes(errors=len(EXPECTED))
    errors = _errors(result)
    assert "Traceback" not in errors and "suffice/" not in errors, errors
    said = 'pip install "suffice[cpu]" (the CPU engine) or "suffice[gpu]" (the GPU engine)'
    assert f"suffice_judge: the engine needs numpy, which is not installed: {said}" in errors
    assert "; with pytest: --suffice-server URL" in errors


@pytest.mark.engine
def test_on_the_real_engine_the_outcome_follows_the_verdict(pytester: pytest.Pytester, suffice_server: str) -> None:
    """Through the session's ``suffice serve``: the small model decides what it decides, and the test's outcome,
    its message and its JUnit property say the same."""
    from tests.conftest import load_records
    from tests.vllm_server import SERVE_KEY

    rows = load_records("squad2.jsonl", 4)
    pytester.makefile(".jsonl", labeled="\n".join(json.dumps(r) for r in rows))
    pytester.makepyfile(
        test_real=f"""
import json

RECORD = json.loads({json.dumps(json.dumps(rows[0]))})


def test_sufficient(suffice_gate):
    suffice_gate.assert_sufficient(RECORD)


def test_agreement(suffice_gate):
    suffice_gate.assert_agreement("labeled.jsonl", min_agreement=0.0)
"""
    )
    xml = pytester.path / "report.xml"
    key_file = pytester.path / "service.key"
    key_file.write_text(SERVE_KEY)
    result = pytester.runpytest_subprocess(
        *_plugin_args(), f"--junitxml={xml}", f"--suffice-server={suffice_server}", f"--suffice-api-key-file={key_file}"
    )
    found = _outcomes(xml)
    outcome, message, properties = found["test_sufficient"]
    verdict = json.loads(dict(properties)["suffice.sufficiency"])
    assert outcome == ("passed" if verdict["passed"] else "failed"), result.stdout.str()
    if not verdict["passed"]:
        for missing in verdict["verdict"]["missing_information"]:
            assert missing in message
    assert found["test_agreement"][0] == "passed", result.stdout.str()
    measured = json.loads(dict(found["test_agreement"][2])["suffice.sufficiency.agreement"])
    assert measured["n"] == sum(isinstance(r.get("sufficient"), bool) for r in rows)
