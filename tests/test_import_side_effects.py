"""Importing suffice changes nothing of the host's process (issue 50): every module of the package, imported in a
process of its own, leaves ``os.environ``, the logging configuration, the warnings filters, the signal handlers, the
exception hooks and the asyncio event loop policy as it found them.  An explicit ``HF_HUB_OFFLINE=0`` stays ``0``:
offline is enforced where suffice loads a model (its engines, its converter, the Ray instance it starts; proven
under strace by tests/test_no_network.py and the tests it names), not by editing the environment on import.

One driver process starts bare (nothing of suffice imported) and forks a child per module, which takes the
state, imports the module, takes the state again and writes what differs:

- the public modules (:data:`PUBLIC`: the package, the client, the batch API, the integrations, the pytest plugin
  and the command's module) are each imported from the bare interpreter, as an application first imports them;
- every other module of the package is imported after ``import suffice`` (which every import of a submodule runs
  first, and which the first group proves changes nothing), so each pays only for itself.

What a dependency's own first import changes is the dependency's (numpy, torch and urllib3 add warnings filters,
Haystack gives its logger a handler; an application that uses suffice's module imports them too): where a first
import changes logging or warnings, the module is imported again in a new child with the modules that import
loaded (suffice's aside) imported first, and what still changes is suffice's doing.  The environment, the signal
handlers, the hooks and the asyncio policy must hold across the dependencies' first imports too.

The one change allowed is the library's own: a :class:`logging.NullHandler` on the ``suffice`` logger, as the
logging HOWTO asks of a library (without it, a warning of suffice's would reach stderr through logging's
last-resort handler in an application that configured no logging).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import suffice
import suffice.integrations
import suffice.testing
from suffice.serving.offline import OFFLINE_ENV
from tests.setup_or_fail import need

ROOT = Path(__file__).resolve().parents[1]


def _entry_point_modules() -> list[str]:
    """The modules suffice's entry points name: the ``suffice`` command's and the pytest plugin's."""
    try:
        points = importlib.metadata.distribution("suffice").entry_points
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return ["suffice.cli.main", "suffice.testing.plugin"]
    return sorted({point.module for point in points if point.group in ("console_scripts", "pytest11")})


def _walk(package: types.ModuleType) -> list[str]:
    return [info.name for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


#: What an application imports: the package, the client, the batch API, every integration, the pytest plugin and
#: the command's module (the last two found through the package's entry points).
PUBLIC = sorted(
    {
        "suffice",
        "suffice.client",
        "suffice.batch",
        "suffice.integrations",
        *_walk(suffice.integrations),
        "suffice.testing",
        *_walk(suffice.testing),
        *_entry_point_modules(),
    }
    # Public names that another part of issue 50 adds: taken in as soon as they exist.
    | {name for name in ("suffice.verdicts",) if importlib.util.find_spec(name) is not None}
)
#: Every other module of the package, private ones (``_moved``) aside.
OTHERS = sorted(name for name in _walk(suffice) if _public(name) and name not in PUBLIC)


#: The driver: argv[1] is a JSON object {"bare": [modules], "after_suffice": [modules]}; it prints one JSON object,
#: module -> what its import changed ({} when nothing), or {"missing": name} for a dependency not installed.
DRIVER = textwrap.dedent(
    r'''
    import asyncio
    import importlib
    import json
    import logging
    import os
    import signal
    import sys
    import tempfile
    import threading
    import traceback
    import warnings

    def handler_name(handler):
        return f"{type(handler).__module__}.{type(handler).__qualname__}@{id(handler):x}"

    def logger_state(logger):
        return {
            "level": logger.level,
            "handlers": [handler_name(h) for h in logger.handlers],
            "filters": [repr(f) for f in logger.filters],
            "propagate": logger.propagate,
            "disabled": logger.disabled,
        }

    def pattern(compiled):
        return getattr(compiled, "pattern", compiled)  # a compiled expression, a plain string or None

    def callable_name(obj):
        name = getattr(obj, "__qualname__", None) or repr(obj)
        return f"{getattr(obj, '__module__', '?')}.{name}@{id(obj):x}"

    def state():
        loggers = {"<root>": logger_state(logging.root)}
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):  # a PlaceHolder is no logger yet
                loggers[name] = logger_state(logger)
        signals = {}
        for number in sorted(signal.valid_signals()):
            try:
                handler = signal.getsignal(number)
            except (OSError, ValueError):
                continue
            signals[signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)] = (
                repr(handler) if handler in (signal.SIG_DFL, signal.SIG_IGN, None) else callable_name(handler)
            )
        # The policy itself, not get_event_loop_policy(), which would create one where none is set yet.
        policy = getattr(asyncio.events, "_event_loop_policy", None)
        return {
            "environ": dict(os.environ),
            "loggers": loggers,
            "logging.disable": logging.root.manager.disable,
            "logging.loggerClass": callable_name(logging.getLoggerClass()),
            "logging.recordFactory": callable_name(logging.getLogRecordFactory()),
            "warnings.filters": [
                [action, pattern(message), callable_name(category), pattern(module), lineno]
                for action, message, category, module, lineno in warnings.filters
            ],
            "warnings.showwarning": callable_name(warnings.showwarning),
            "warnings.formatwarning": callable_name(warnings.formatwarning),
            "signals": signals,
            "sys.excepthook": callable_name(sys.excepthook),
            "threading.excepthook": callable_name(threading.excepthook),
            "asyncio.policy": None if policy is None else f"{type(policy).__qualname__}@{id(policy):x}",
        }

    # A new logger is the importer's own: it may carry no configuration, but the library's NullHandler.
    FRESH = {"level": 0, "handlers": [], "filters": [], "propagate": True, "disabled": False}

    def changes(before, after):
        found = {}
        for key, was in before.items():
            now = after[key]
            if key == "loggers" or now == was:
                continue
            if isinstance(was, dict):  # the environment, the signals: each name that differs, [before, after]
                names = sorted(set(was) | set(now))
                found[key] = {n: [was.get(n), now.get(n)] for n in names if was.get(n) != now.get(n)}
            elif isinstance(was, list):  # the warnings filters
                found[key] = {"added": [f for f in now if f not in was], "removed": [f for f in was if f not in now]}
                if not found[key]["added"] and not found[key]["removed"]:
                    found[key] = {"reordered": now}
            else:
                found[key] = [was, now]
        for name, now in after["loggers"].items():
            was = before["loggers"].get(name)
            if was is None:
                allowed = dict(FRESH)
                if name == "suffice" and len(now["handlers"]) == 1 and now["handlers"][0].startswith(
                    "logging.NullHandler@"
                ):
                    allowed["handlers"] = now["handlers"]
                was = allowed
            if now != was:
                found[f"logger {name}"] = [was, now]
        return found

    def missing_dependency(exc):
        """The name of a module not installed (not suffice's) behind an ImportError, else None."""
        while exc is not None:
            if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.partition(".")[0] != "suffice":
                return exc.name
            exc = exc.__cause__ or exc.__context__
        return None

    #: What a dependency's own first import may change: numpy, torch and urllib3 add warnings filters, Haystack
    #: gives its logger a handler.  An application that imports suffice's module imports them too; these are told
    #: apart by a second import with them loaded first.  The rest (the environment above all, signal handlers,
    #: hooks, the asyncio policy) must hold across their first imports too.
    THEIRS = ("logger ", "logging.", "warnings.")

    def probe(module, preload):
        for name in preload:
            try:
                importlib.import_module(name)
            except BaseException:
                pass
        before, known = state(), set(sys.modules)
        try:
            importlib.import_module(module)
        except ImportError as exc:
            name = missing_dependency(exc)
            if name is None:
                raise
            return {"missing": name}
        loaded = [name for name in sys.modules if name not in known and name.partition(".")[0] != "suffice"]
        return {"changes": changes(before, state()), "loaded": loaded}

    def forked(module, preload=()):
        """probe() in a child of this process, so each import starts where this one stands."""
        with tempfile.TemporaryFile("w+") as out:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    out.write(json.dumps(probe(module, preload)))
                except BaseException:
                    out.write(json.dumps({"import failed": traceback.format_exc()}))
                    code = 1
                out.flush()
                os._exit(code)
            os.waitpid(pid, 0)
            out.seek(0)
            return json.loads(out.read() or '{"child died": "no output"}')

    def examine(module):
        """What importing ``module`` changed that is suffice's doing: {} when nothing."""
        first = forked(module)
        if "changes" not in first:
            return first
        found = first["changes"]
        if not any(key.startswith(THEIRS) for key in found):
            return found
        # Again, its dependencies imported first, as an application that uses them has: what is left is suffice's.
        again = forked(module, first["loaded"])
        if "changes" not in again:
            return again
        return {**{k: v for k, v in found.items() if not k.startswith(THEIRS)}, **again["changes"]}

    plan = json.loads(sys.argv[1])
    results = {}
    for module in plan["bare"]:
        results[module] = examine(module)
    if plan["after_suffice"]:
        import suffice  # noqa: F401  (its own changes: the bare group's)

        if threading.active_count() != 1:
            raise SystemExit(f"import suffice started threads: {threading.enumerate()} (no fork is safe after it)")
        for module in plan["after_suffice"]:
            results[module] = examine(module)
    print("RESULTS " + json.dumps(results))
    '''
)


def host_environment() -> dict[str, str]:
    """This test's environment as an application might have it: none of the variables suffice sets for its own
    loading, but ``HF_HUB_OFFLINE=0`` (an application that fetches its embedder from its own hub mirror)."""
    env = {name: value for name, value in os.environ.items() if name not in OFFLINE_ENV}
    env["HF_HUB_OFFLINE"] = "0"
    return env


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """What each module's import changed, from one driver run (HOME its own: Haystack imported without suffice's
    window writes its telemetry id there)."""
    plan = json.dumps({"bare": PUBLIC, "after_suffice": OTHERS})
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, plan],
        cwd=ROOT,
        env={**host_environment(), "HOME": str(tmp_path_factory.mktemp("home"))},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert done.returncode == 0 and lines, f"the driver failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    results: dict[str, dict[str, object]] = json.loads(lines[-1].removeprefix("RESULTS "))
    return results


def _check(changed: dict[str, dict[str, object]], module: str) -> None:
    result = changed[module]
    if "missing" in result:
        need(False, f"{module} needs {result['missing']}, which is not installed (CI installs every extra)")
    assert result == {}, f"importing {module} changed the process:\n{json.dumps(result, indent=1)[:6000]}"


def test_the_lists_hold_the_modules_an_application_imports():
    assert {"suffice", "suffice.client", "suffice.testing.plugin", "suffice.cli.main"} <= set(PUBLIC)
    assert {"suffice.integrations.haystack", "suffice.integrations.langchain"} <= set(PUBLIC)
    assert "suffice.serving.vllm.engine" in OTHERS and "suffice.serving.offline" in OTHERS


@pytest.mark.parametrize("module", PUBLIC)
def test_importing_a_public_module_changes_nothing_of_the_process(changed: dict[str, dict[str, object]], module: str):
    _check(changed, module)


@pytest.mark.parametrize("module", OTHERS)
def test_importing_any_other_module_changes_nothing_of_the_process(changed: dict[str, dict[str, object]], module: str):
    _check(changed, module)


def test_an_explicit_hub_setting_of_the_application_stays():
    """``HF_HUB_OFFLINE=0`` set by the application is still ``0`` after ``import suffice``, in os.environ and in the
    hub client imported after it; no other offline variable appears."""
    need(importlib.util.find_spec("huggingface_hub") is not None, "huggingface_hub is not installed (CI has it)")
    code = (
        "import os, json, suffice, huggingface_hub.constants as c\n"
        "print(json.dumps([os.environ.get('HF_HUB_OFFLINE'), c.HF_HUB_OFFLINE,"
        " sorted(n for n in os.environ if n.endswith('_OFFLINE'))]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=host_environment(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["0", False, ["HF_HUB_OFFLINE"]]
