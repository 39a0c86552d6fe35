"""Gates are found through the ``suffice.gates`` entry points; a broken registration is a
ConfigError naming the gate, never a traceback, and never stops the other gates."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from suffice.cli.main import main
from suffice.exceptions import EXIT_USAGE, ConfigError
from suffice.gates import registry

GROUP = registry.ENTRY_POINT_GROUP
BUILT_IN = [
    EntryPoint("sufficiency", "suffice.gates.sufficiency:SufficiencyGate", GROUP),
    EntryPoint("recovery", "suffice.gates.recovery:RecoveryGate", GROUP),
]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch):
    """Replace the installed gates' entry points with the ones a test gives."""
    installed = registry.entry_points

    def use(*points: EntryPoint) -> None:
        monkeypatch.setattr(
            registry, "entry_points", lambda group: list(points) if group == GROUP else installed(group=group)
        )
        registry.GATES.forget()

    yield use
    registry.GATES.forget()


def test_a_gate_whose_module_cannot_be_imported_is_a_config_error_naming_it(registered):
    registered(*BUILT_IN, EntryPoint("broken", "no_such_module_anywhere:Gate", GROUP))
    with pytest.raises(ConfigError) as caught:
        registry.gate_class("broken")
    assert "no_such_module_anywhere" in str(caught.value)


def test_a_registration_that_is_not_a_gate_is_refused(registered):
    registered(*BUILT_IN, EntryPoint("path", "pathlib:Path", GROUP))
    with pytest.raises(ConfigError) as caught:
        registry.gate_class("path")
    assert caught.value.parameter == "gate"


def test_a_gate_registered_under_another_name_than_its_own_is_refused(registered):
    registered(*BUILT_IN, EntryPoint("other", "suffice.gates.sufficiency:SufficiencyGate", GROUP))
    with pytest.raises(ConfigError):
        registry.gate_class("other")


def test_one_name_registered_twice_by_different_code_is_refused(registered):
    registered(*BUILT_IN, EntryPoint("recovery", "suffice.gates.sufficiency:SufficiencyGate", GROUP))
    with pytest.raises(ConfigError) as caught:
        registry.gate_names()
    assert "registered twice" in str(caught.value)


def test_an_unknown_gate_lists_the_registered_ones(registered):
    registered(*BUILT_IN)
    with pytest.raises(ConfigError) as caught:
        registry.make_gate("nope")
    assert "sufficiency, recovery" in str(caught.value)


def test_the_default_gate_comes_first(registered):
    registered(*reversed(BUILT_IN))
    assert registry.gate_names()[0] == registry.DEFAULT_GATE


def test_a_broken_gate_does_not_stop_the_command_for_the_others(registered, tmp_path: Path, capsys):
    registered(*BUILT_IN, EntryPoint("broken", "no_such_module_anywhere:Gate", GROUP))
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "question": "q", "chunks": [{"id": 0, "text": "t"}]}\n')
    code = main(["judge", str(source), "-o", str(tmp_path / "out.jsonl"), "--gate", "broken"])
    assert code == EXIT_USAGE
    assert "no_such_module_anywhere" in capsys.readouterr().err
