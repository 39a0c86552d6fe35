"""The names renamed so that a noun means one thing (issue 39; the nouns: docs/layout.md) keep their old name for one
release: each old name gives the same object with a DeprecationWarning naming the new one, and nothing in this
repository uses an old name (so no such warning fires in the suite)."""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
#: (module, old name, new name).
RENAMED = [
    ("suffice.serving.machine", "MachineSettings", "MachineConfig"),
    ("suffice.serving.machine", "machine_settings", "machine_config"),
    ("suffice.serving.machine", "apply_settings", "apply_machine_config"),
    ("suffice.cli.serve_settings", "CommandSettings", "SettingSources"),
    ("suffice.cli.serve_settings", "ServeSettings", "SettingSources"),
    ("suffice.server.routes", "GateSettings", "SettingsAnswer"),
    ("suffice.server.app", "GateSettings", "SettingsAnswer"),
]


@pytest.mark.parametrize(("module", "old", "new"), RENAMED, ids=[f"{m}.{o}" for m, o, _ in RENAMED])
def test_an_old_name_warns_and_gives_the_new_object(module: str, old: str, new: str) -> None:
    loaded = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{module}.{old} was renamed {new} ")):
        assert getattr(loaded, old) is getattr(loaded, new)
    scope: dict[str, object] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(f"from {module} import {old}", scope)
    assert scope[old] is getattr(loaded, new)
    assert [str(w.message) for w in caught] == [
        f"{module}.{old} was renamed {new} (the old name goes in the next release)"
    ]


@pytest.mark.parametrize("module", sorted({m for m, _, _ in RENAMED}))
def test_a_name_that_never_was_is_still_an_attribute_error(module: str) -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = importlib.import_module(module).no_such_name
    with pytest.raises(ImportError):
        exec(f"from {module} import no_such_name", {})


def test_nothing_here_uses_an_old_name() -> None:
    old = {name for _, name, _ in RENAMED}
    pattern = re.compile(r"\b(" + "|".join(sorted(old)) + r")\b")
    found = {
        str(path.relative_to(ROOT)): sorted(set(pattern.findall(text)))
        for folder in ("suffice", "tests", "benchmarks", "examples", "scripts")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != Path(__file__)
        for text in [path.read_text(encoding="utf-8")]
        if pattern.search(text)
    }
    # The alias tables themselves name them.
    assert found == {
        "suffice/cli/serve_settings.py": ["CommandSettings", "ServeSettings"],
        "suffice/server/app.py": ["GateSettings"],
        "suffice/server/routes.py": ["GateSettings"],
        "suffice/serving/machine.py": ["MachineSettings", "apply_settings", "machine_settings"],
    }
