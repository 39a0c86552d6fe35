"""The verdict classes of suffice's gates, for typing results: ``JudgeResult[SufficiencyVerdict]`` types its
``verdict`` (:class:`~suffice.results.JudgeResult`), and ``isinstance(r.verdict, RecoveryVerdict)`` narrows one.
A decision-only judge (``detail="decision"``, and the decision pass of ``detail="auto"``) gives a
:class:`DecisionVerdict`."""

from suffice.gates.adequacy.grammar import AdequacyVerdict
from suffice.gates.recovery.grammar import RecoveryVerdict
from suffice.gates.sufficiency.grammar import SufficiencyVerdict
from suffice.grammars.decision_verdict import DecisionVerdict

__all__ = ["AdequacyVerdict", "DecisionVerdict", "RecoveryVerdict", "SufficiencyVerdict"]
