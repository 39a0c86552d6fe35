"""Registries stay honest: every engine implements the whole engine interface, every gate
every hook, and every gate's segments are request-independent except the declared ones."""

import inspect
import typing

import pytest
from pydantic import BaseModel

from suffice.gates import AdequacyGate, DecisionGate, RecoveryGate, SufficiencyGate
from suffice.gates.base import Gate
from suffice.serving.base import Engine
from suffice.serving.engine_config import ENGINES as KINDS
from suffice.serving.factory import ENGINE_CLASSES, engine_class
from suffice.serving.openai import OpenAIEngine
from suffice.serving.transformers_engine import TransformersEngine
from suffice.serving.vllm_engine import VLLMEngine
from tests.fakes import ScriptedEngine

ENGINES = [VLLMEngine, TransformersEngine, OpenAIEngine, ScriptedEngine]
GATES = [SufficiencyGate(), RecoveryGate(), AdequacyGate(rubric="customer-support")]


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_every_engine_implements_every_method_with_the_same_parameters(engine):
    assert not inspect.isabstract(engine)
    for name, member in inspect.getmembers(Engine, inspect.isfunction):
        if name.startswith("_"):
            continue
        expected = list(inspect.signature(member).parameters)
        assert list(inspect.signature(getattr(engine, name)).parameters) == expected, name


@pytest.mark.parametrize("kind", KINDS)
def test_the_factory_makes_every_engine_kind_the_config_accepts(kind):
    cls = engine_class(kind)
    assert issubclass(cls, Engine)
    assert cls in ENGINES


def test_the_factory_names_no_engine_the_config_refuses():
    assert sorted(ENGINE_CLASSES) == sorted(KINDS)


@pytest.mark.parametrize("gate", [*GATES, *(DecisionGate(g) for g in GATES)], ids=lambda g: type(g).__name__ + g.name)
def test_every_gate_implements_every_hook(gate):
    assert not inspect.isabstract(type(gate))
    for name in ("decision_key", "decision_json_values", "positive_value", "decision_marker"):
        assert getattr(gate, name), name
    assert gate.prompt_version.startswith(gate.name + "/")
    assert isinstance(gate, Gate)


@pytest.mark.parametrize("gate", [*GATES, *(DecisionGate(g) for g in GATES)], ids=lambda g: type(g).__name__ + g.name)
def test_every_gate_names_the_pydantic_class_of_its_verdicts(gate):
    """``verdict_model`` is what the typed Parquet schema is built from: it must be the
    class ``parse`` and ``shortcut`` return, declared on the gate's own class."""
    model = type(gate).__dict__.get("verdict_model")
    assert isinstance(model, type), type(gate).__name__
    assert issubclass(model, BaseModel)
    assert typing.get_type_hints(type(gate).parse)["return"] is model
    item = gate.parse_item({"id": "a", "question": "Who?", "chunks": [], "response": "Nobody."})
    assert isinstance(gate.shortcut(item), model)


def test_every_gate_name_the_config_accepts_builds_a_gate():
    from suffice.config import GATES as NAMES
    from suffice.gates import make_gate

    assert sorted(make_gate(name, rubric="customer-support").name for name in NAMES) == sorted(NAMES)


HOOKS = ("route", "calibration_scores", "seed_verdict", "is_positive", "parse", "constraint_for")


@pytest.mark.parametrize("gate", GATES, ids=lambda g: g.name)
@pytest.mark.parametrize("hook", HOOKS)
def test_every_gate_defines_its_own_hooks(gate, hook):
    assert getattr(type(gate), hook) is not getattr(Gate, hook)


def _exception_classes():
    import suffice.exceptions as module
    from suffice.exceptions import SufficeError

    seen = []
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, SufficeError):
            seen.append(value)
    return seen


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: c.__name__)
def test_every_suffice_error_pickles_with_its_fields(cls):
    """Errors cross process boundaries (Ray actors): each must come back as itself."""
    import inspect
    import pickle

    params = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    args = [f"v{i}" for i, p in enumerate(params) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    exc = cls(*args) if args or not params else cls("message")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is cls
    assert str(back) == str(exc)
    assert back.__dict__ == exc.__dict__
