"""The summary a batch run prints: counts, share sufficient, agreement, speed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from suffice.results import JudgeResult


def _never(verdict: BaseModel) -> bool:
    return False


@dataclass
class RunSummary:
    """``positive`` is the gate's own rule (``Gate.is_positive``): what routes is what is counted."""

    positive: Callable[[BaseModel], bool] = _never
    items: int = 0
    verdicts: int = 0
    errors: int = 0
    sufficient: int = 0
    labeled: int = 0
    agree: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, records: Sequence[object], results: Sequence[JudgeResult]) -> None:
        for record, result in zip(records, results, strict=True):
            self.items += 1
            self.prompt_tokens += result.tokens.prompt
            self.completion_tokens += result.tokens.completion
            if result.verdict is None:
                self.errors += 1
                continue
            self.verdicts += 1
            decision = self.positive(result.verdict)
            self.sufficient += decision
            label = record.get("sufficient") if isinstance(record, Mapping) else None
            if isinstance(label, bool):
                self.labeled += 1
                self.agree += decision == label

    @property
    def share_sufficient(self) -> float | None:
        return self.sufficient / self.verdicts if self.verdicts else None

    @property
    def agreement(self) -> float | None:
        return self.agree / self.labeled if self.labeled else None

    @property
    def tokens_per_verdict(self) -> float | None:
        return self.completion_tokens / self.verdicts if self.verdicts else None

    @property
    def verdicts_per_second(self) -> float | None:
        return self.verdicts / self.seconds if self.seconds > 0 else None

    def table(self) -> str:
        def fmt(value: float | None, pattern: str) -> str:
            return "n/a" if value is None else pattern.format(value)

        rows = [
            ("items", str(self.items)),
            ("verdicts", str(self.verdicts)),
            ("errors", str(self.errors)),
            ("share judged sufficient (or PASS)", fmt(self.share_sufficient, "{:.1%}")),
            ("agreement with labels", fmt(self.agreement, "{:.1%}") + f" (of {self.labeled} labeled)"),
            ("verdicts per second", fmt(self.verdicts_per_second, "{:.2f}")),
            ("output tokens per verdict", fmt(self.tokens_per_verdict, "{:.0f}")),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
