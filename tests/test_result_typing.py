"""Results are generic over the verdict type: ``mypy --strict`` accepts the documented ``r.verdict.is_sufficient``
on a judge's results, checks the fields of a ``JudgeResult[SufficiencyVerdict]``, and the verdict classes are public
(:mod:`suffice.verdicts`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import suffice.verdicts
from suffice.gates import gate_class

ROOT = Path(__file__).resolve().parent.parent

CHECKED = textwrap.dedent(
    """
    import suffice
    from suffice.results import JudgeResult
    from suffice.verdicts import DecisionVerdict, RecoveryVerdict, SufficiencyVerdict


    def documented(judge: suffice.JudgeProtocol, records: list[dict[str, object]]) -> list[bool]:
        return [r.verdict is not None and r.verdict.is_sufficient for r in judge.judge_batch(records)]


    def typed(results: list[JudgeResult[SufficiencyVerdict]]) -> list[bool]:
        found: list[bool] = []
        for r in results:
            if r.verdict is not None:
                found.append(r.verdict.is_sufficient)
        return found


    def narrowed(result: JudgeResult) -> float | None:
        if isinstance(result.verdict, RecoveryVerdict):
            return float(len(result.verdict.supported_claims))
        if isinstance(result.verdict, DecisionVerdict):
            return result.verdict.probability
        return None
    """
)
#: A field the verdict class does not have: mypy must refuse it.
WRONG = textwrap.dedent(
    """
    from suffice.results import JudgeResult
    from suffice.verdicts import SufficiencyVerdict


    def typo(results: list[JudgeResult[SufficiencyVerdict]]) -> bool:
        return any(r.verdict.is_sufficent for r in results if r.verdict is not None)
    """
)


def test_mypy_strict_accepts_typed_results_and_refuses_a_field_the_verdict_lacks(tmp_path):
    (tmp_path / "checked.py").write_text(CHECKED, encoding="utf-8")
    (tmp_path / "wrong.py").write_text(WRONG, encoding="utf-8")
    # The project's mypy settings (pyproject.toml: strict) and its cache, warm after `mypy suffice`; only the
    # examples' errors count (the package is checked on its own).
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(tmp_path / "checked.py"), str(tmp_path / "wrong.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.splitlines()
    errors = [
        line for line in lines if ": error:" in line and Path(line.split(":")[0]).name in ("checked.py", "wrong.py")
    ]
    assert len(errors) == 1, done.stdout + done.stderr
    assert "wrong.py:7:" in errors[0] and '"is_sufficent"' in errors[0]


def test_the_verdicts_module_holds_each_builtin_gates_verdict_class():
    public = {getattr(suffice.verdicts, name) for name in suffice.verdicts.__all__}
    assert {gate_class(name).verdict_model for name in ("sufficiency", "recovery", "adequacy")} <= public
