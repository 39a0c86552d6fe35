"""The summary a batch run prints: counts, share sufficient, agreement, the routes taken
(with the abstention, review and override rates the seeds say to watch), speed, and the
output tokens per verdict (decode is most of a full verdict's cost on a GPU)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from suffice.results import Judged, JudgeResult, Tally

__all__ = ["ROUTES", "RunSummary"]

#: Every route a verdict can take, in the order they are shown (``suffice.grammars.routes.Route``).
ROUTES = ("deliver", "retrieve_more", "abstain", "human_review")


def _no_notice(model: str) -> str | None:
    return None


@dataclass
class RunSummary(Tally):
    """A batch run's view of its :class:`~suffice.results.Tally`: a batch run publishes each batch it writes to it.
    ``positive``, ``route`` and ``model_positive`` are the gate's (``Gate.is_positive``, ``Gate.route(verdict).route``
    and ``suffice.gates.roles.model_positive``).  ``seconds`` is the run's, set by the run."""

    gate: str = ""
    seconds: float = 0.0
    #: What the run must say of its model (the embedded one's verdicts are not judgements), read from its rows'
    #: model ids by ``notice_of`` (the batch run gives :func:`suffice.serving.weights.embedded_notice`).
    notice: str | None = None
    notice_of: Callable[[str], str | None] = _no_notice

    def add(self, records: Sequence[object], results: Sequence[JudgeResult]) -> None:
        """Count ``results`` (one per record) as if published (:meth:`on_judged`)."""
        self.on_judged(Judged(records, results))

    def on_judged(self, judged: Judged) -> None:
        super().on_judged(judged)
        if self.notice is None:
            self.notice = next((n for r in judged.results if (n := self.notice_of(r.model)) is not None), None)

    @property
    def share_sufficient(self) -> float | None:
        return self.sufficient / self.verdicts if self.verdicts else None

    @property
    def agreement(self) -> float | None:
        return self.agree / self.labeled if self.labeled else None

    @property
    def routed(self) -> int:
        return sum(self.routes.values())

    def route_share(self, route: str) -> float | None:
        """The share of the routed verdicts that took ``route``."""
        return self.routes.get(route, 0) / self.routed if self.routed else None

    @property
    def abstention_rate(self) -> float | None:
        return self.route_share("abstain")

    @property
    def review_rate(self) -> float | None:
        return self.route_share("human_review")

    @property
    def override_rate(self) -> float | None:
        """The share of the verdicts with a model decision of their own that the code's decision overrode."""
        return self.overrides / self.model_decided if self.model_decided else None

    def to_dict(self) -> dict[str, Any]:
        """The summary as plain JSON values (shares ``None`` where nothing was counted)."""
        return {
            "gate": self.gate,
            "items": self.items,
            "verdicts": self.verdicts,
            "errors": self.errors,
            "share_sufficient": self.share_sufficient,
            "labeled": self.labeled,
            "agreement": self.agreement,
            "routes": {route: self.routes.get(route, 0) for route in self._route_names()},
            "route_shares": {route: self.route_share(route) for route in self._route_names()},
            "abstention_rate": self.abstention_rate,
            "review_rate": self.review_rate,
            "model_decided": self.model_decided,
            "overrides": self.overrides,
            "override_rate": self.override_rate,
            "seconds": self.seconds,
            "verdicts_per_second": self.verdicts_per_second,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tokens_per_verdict": self.tokens_per_verdict,
            "max_tokens_per_verdict": self.output_tokens.max,
            "cache_hits": self.cache_hits,
        }

    def _route_names(self) -> list[str]:
        return [*ROUTES, *sorted(set(self.routes) - set(ROUTES))]

    @property
    def tokens_per_verdict(self) -> float | None:
        """The mean output tokens of a verdict the model generated (all its attempts)."""
        return self.output_tokens.mean

    @property
    def verdicts_per_second(self) -> float | None:
        return self.verdicts / self.seconds if self.seconds > 0 else None

    def table(self) -> str:
        def fmt(value: float | None, pattern: str) -> str:
            return "n/a" if value is None else pattern.format(value)

        rows = [
            *((("gate", self.gate),) if self.gate else ()),
            *((("note", self.notice),) if self.notice else ()),
            ("items", str(self.items)),
            ("verdicts", str(self.verdicts)),
            *((("from the verdict cache", str(self.cache_hits)),) if self.cache_hits else ()),
            ("errors", str(self.errors)),
            ("share judged sufficient (or PASS)", fmt(self.share_sufficient, "{:.1%}")),
            ("agreement with labels", fmt(self.agreement, "{:.1%}") + f" (of {self.labeled} labeled)"),
            *(
                (f"route {route}", f"{self.routes.get(route, 0)} ({fmt(self.route_share(route), '{:.1%}')})")
                for route in self._route_names()
            ),
            ("abstention rate", fmt(self.abstention_rate, "{:.1%}")),
            ("review rate", fmt(self.review_rate, "{:.1%}")),
            (
                "override rate (code over model)",
                fmt(self.override_rate, "{:.1%}") + f" (of {self.model_decided} with a model decision)",
            ),
            ("verdicts per second", fmt(self.verdicts_per_second, "{:.2f}")),
            ("output tokens per verdict", self._output_tokens_row()),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def _output_tokens_row(self) -> str:
        tokens = self.output_tokens
        of = f"(of {tokens.verdicts} the model generated)"
        return "n/a " + of if tokens.mean is None else f"mean {tokens.mean:.0f}, max {tokens.max} {of}"
