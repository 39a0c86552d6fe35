"""Registries stay honest: every engine implements the whole engine interface, every
registered gate every hook, and no code outside a gate's package names a gate."""

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

import suffice
from suffice.formats.verdicts import verdict_format
from suffice.formats.verdicts.seed import SeedVerdicts
from suffice.gates import DecisionGate, Gate, GateOptions, Verdict, gate_class, gate_names, make_gate, roles
from suffice.gates.registry import DEFAULT_CHECK_GATE, DEFAULT_GATE
from suffice.serving.base import Engine
from suffice.serving.engine_config import ENGINES as KINDS
from suffice.serving.factory import ENGINE_CLASSES, engine_class
from suffice.serving.openai import OpenAIEngine
from suffice.serving.transformers_engine import TransformersEngine
from suffice.serving.vllm.engine import VLLMEngine
from suffice.settings import declared
from tests.fakes import ScriptedEngine

ENGINES = [VLLMEngine, TransformersEngine, OpenAIEngine, ScriptedEngine]
GATES = [make_gate(name) for name in gate_names()]
#: A record every gate can take (a post-generation gate reads the response, the adequacy
#: gate the rubric; the others leave both).
RECORD = {"id": "a", "question": "Who?", "chunks": [], "response": "Nobody.", "rubric": "customer-support"}


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
    token = roles.decision_of(gate)  # every registered gate takes the decision role: --detail decision works
    assert token is not None and token.key and token.values and token.positive and token.marker
    assert gate.prompt_version.startswith(gate.name + "/")
    assert isinstance(gate, Gate)


@pytest.mark.parametrize("gate", [*GATES, *(DecisionGate(g) for g in GATES)], ids=lambda g: type(g).__name__ + g.name)
def test_every_gate_names_the_pydantic_class_of_its_verdicts(gate):
    """``verdict_model`` is what the typed Parquet schema is built from: it must be the
    class ``parse`` and ``shortcut`` return, declared on the gate's own class."""
    model = type(gate).__dict__.get("verdict_model")
    assert isinstance(model, type), type(gate).__name__
    assert issubclass(model, BaseModel)
    parses = type(gate).parse if _own(gate, "parse") else type(gate).from_output
    assert typing.get_type_hints(parses)["return"] is model
    item = roles.parse_item(gate, RECORD)
    assert isinstance(roles.shortcut(gate, item), model)


@pytest.mark.parametrize("name", gate_names())
def test_every_registered_gate_is_built_under_its_own_name(name):
    assert make_gate(name).name == name


@pytest.mark.parametrize("name", gate_names())
def test_every_gate_declares_its_options_as_settings(name):
    options = gate_class(name).options_model
    assert issubclass(options, GateOptions)
    assert [f.name for f in dataclasses.fields(options)] == [d.name for d in declared(options)]


def _literals_outside_gate_packages() -> list[tuple[str, int, str]]:
    """Every string constant equal to a gate's name in suffice's code outside the
    gates' own packages (docstrings aside)."""
    root = Path(suffice.__file__).parent
    names = set(gate_names())
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).parts
        if relative[0] == "gates" and len(relative) > 2 and relative[1] in names:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(("/".join(relative), node.lineno, node.value))
    return found


def test_no_code_outside_a_gates_package_names_a_gate():
    """Only the registry's defaults name one: the gate a judge uses when none is named, and the
    one a check of a generated answer uses; and suffice.testing's ``assert_adequate``, the one named
    test helper of a built-in gate that no default stands for."""
    named = [(path, name) for path, _, name in _literals_outside_gate_packages()]
    assert named == [
        ("gates/registry.py", DEFAULT_GATE),
        ("gates/registry.py", DEFAULT_CHECK_GATE),
        ("testing/assertions.py", "adequacy"),
    ]


HOOKS = ("route", "parse", "constraint_for")
#: What the built-in gates define rather than take the default for (a gate from outside may take it).
BUILT_IN_HOOKS = ("calibration_scores", "is_positive", "model_positive")
BUILT_IN = [g for g in GATES if type(g).__module__.startswith("suffice.")]


def _own(gate: Gate, hook: str) -> bool:
    return getattr(type(gate), hook) is not getattr(Gate, hook)


@pytest.mark.parametrize("gate", GATES, ids=lambda g: g.name)
@pytest.mark.parametrize("hook", HOOKS)
def test_every_gate_defines_its_own_hooks_or_what_the_core_derives_them_from(gate, hook):
    """Its own, or the core's derived from its declarations: the constraint and the parse from ``output_model`` and
    ``from_output``, the route from a :class:`suffice.Verdict`'s ``passes``."""
    if hook == "route":
        assert _own(gate, hook) or issubclass(gate.verdict_model, Verdict)
    else:
        assert _own(gate, hook) or (gate.output_model is not None and callable(getattr(gate, "from_output", None)))


@pytest.mark.parametrize("gate", BUILT_IN, ids=lambda g: g.name)
@pytest.mark.parametrize("hook", HOOKS)
def test_every_built_in_gate_defines_its_own_hooks(gate, hook):
    assert _own(gate, hook)


@pytest.mark.parametrize("gate", BUILT_IN, ids=lambda g: g.name)
@pytest.mark.parametrize("hook", BUILT_IN_HOOKS)
def test_every_built_in_gate_defines_its_roles_hooks(gate, hook):
    assert any(hook in vars(klass) for klass in type(gate).__mro__ if klass is not Gate)


@pytest.mark.parametrize("gate", BUILT_IN, ids=lambda g: g.name)
def test_every_built_in_gate_offers_the_seed_role(gate):
    """``--format seed`` is a role a gate may offer (not a base-class method): suffice's own gates all do."""
    assert isinstance(gate, SeedVerdicts)
    assert verdict_format("seed").refuses(gate) is None


@pytest.mark.parametrize(
    "gate", [*BUILT_IN, *(DecisionGate(g) for g in GATES)], ids=lambda g: type(g).__name__ + g.name
)
def test_every_gate_says_the_models_own_decision_beside_the_routed_one(gate):
    """``model_positive`` (for the override rate of the summary and ``/metrics``) is a
    boolean or ``None`` for any verdict the gate gives; decision-only mode has none."""
    verdict = roles.shortcut(gate, roles.parse_item(gate, RECORD))
    assert "model_positive" in type(gate).__dict__
    assert roles.model_positive(gate, verdict) in (True, False, None)
    if isinstance(gate, DecisionGate):
        assert roles.model_positive(gate, verdict) is None


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
