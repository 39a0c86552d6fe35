"""Importing suffice's client side never imports the engine's stack (vLLM, torch, transformers), here where
they are installed: an application that judges through ``suffice serve`` pays for none of them.  Haystack
itself imports torch when it can find it, so its integration is imported with the three made unfindable:
it must work without them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("vllm", "torch", "transformers")
LIGHT = (
    "suffice",
    "suffice.client",
    "suffice.integrations",
    "suffice.integrations.gating",
    "suffice.integrations.langchain",
    "suffice.integrations.llama_index",
    "suffice.testing",
    "suffice.testing.plugin",
)

BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in %r:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, Block())
    """
)


def _imported(module: str, blocked: bool) -> list[str]:
    code = (BLOCK % (HEAVY,) if blocked else "") + textwrap.dedent(
        f"""
        import importlib, json, sys
        importlib.import_module({module!r})
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout))


@pytest.mark.parametrize("module", LIGHT)
def test_importing_it_imports_no_engine_stack(module: str):
    assert _imported(module, blocked=False) == []


def test_the_haystack_integration_imports_without_the_engine_stack():
    assert _imported("suffice.integrations.haystack", blocked=True) == []
