"""The summary a batch run prints: counts, share sufficient, agreement, the routes taken
(with the abstention, review and override rates the seeds say to watch), speed, and the
output tokens per verdict (decode is most of a full verdict's cost on a GPU)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from suffice.results import Judged, JudgeResult

#: Every route a verdict can take, in the order they are shown (``suffice.grammars.routes.Route``).
ROUTES = ("deliver", "retrieve_more", "abstain", "human_review")


@dataclass
class OutputTokens:
    """Completion tokens per verdict the model generated (a verdict made without the model decodes nothing and is
    not counted): how many, their mean and their largest."""

    verdicts: int = 0
    total: int = 0
    most: int = 0

    def add(self, completion: int) -> None:
        if completion <= 0:
            return
        self.verdicts += 1
        self.total += completion
        self.most = max(self.most, completion)

    @property
    def mean(self) -> float | None:
        return self.total / self.verdicts if self.verdicts else None

    @property
    def max(self) -> int | None:
        return self.most if self.verdicts else None

    def to_dict(self) -> dict[str, Any]:
        return {"verdicts": self.verdicts, "mean": self.mean, "max": self.max}


def _never(verdict: BaseModel) -> bool:
    return False


def _no_route(verdict: BaseModel) -> str | None:
    return None


def _no_model_decision(verdict: BaseModel) -> bool | None:
    return None


def _no_notice(model: str) -> str | None:
    return None


@dataclass
class RunSummary:
    """``positive`` is the gate's own rule (``Gate.is_positive``): what routes is what is counted.
    ``route`` names where a verdict goes (``Gate.route(verdict).route``) and ``model_positive`` the
    model's own decision beside the routed one (``suffice.gates.roles.model_positive``; ``None``: no separate one).
    A verdict whose routed decision differs from the model's own is an override.

    A :class:`~suffice.results.ResultsObserver`: a batch run publishes each batch it writes to it (:meth:`on_judged`).
    ``seconds`` is the run's, set by the run."""

    gate: str = ""
    positive: Callable[[BaseModel], bool] = _never
    route: Callable[[BaseModel], str | None] = _no_route
    model_positive: Callable[[BaseModel], bool | None] = _no_model_decision
    items: int = 0
    verdicts: int = 0
    errors: int = 0
    sufficient: int = 0
    labeled: int = 0
    agree: int = 0
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Verdicts by the route they took.
    routes: dict[str, int] = field(default_factory=dict)
    #: Verdicts with a model decision of their own, and those whose routed decision differs from it.
    model_decided: int = 0
    overrides: int = 0
    #: Completion tokens of each verdict the model generated.
    output_tokens: OutputTokens = field(default_factory=OutputTokens)
    #: Verdicts the verdict cache answered: no engine work this run, so no tokens counted for them.
    cache_hits: int = 0
    #: What the run must say of its model (the embedded one's verdicts are not judgements), read from its rows'
    #: model ids by ``notice_of`` (the batch run gives :func:`suffice.serving.models.embedded_notice`).
    notice: str | None = None
    notice_of: Callable[[str], str | None] = _no_notice

    def add(self, records: Sequence[object], results: Sequence[JudgeResult]) -> None:
        """Count ``results`` (one per record) as if published (:meth:`on_judged`)."""
        self.on_judged(Judged(records, results))

    def on_judged(self, judged: Judged) -> None:
        for record, result in zip(judged.records, judged.results, strict=True):
            self.items += 1
            if self.notice is None:
                self.notice = self.notice_of(result.model)
            hit = result.cached is not None
            self.cache_hits += hit
            if not hit:
                self.prompt_tokens += result.tokens.prompt
                self.completion_tokens += result.tokens.completion
            if result.verdict is None:
                self.errors += 1
                continue
            self.verdicts += 1
            if not hit:
                self.output_tokens.add(result.tokens.completion)
            route = self.route(result.verdict)
            # Counted by the route where there is one: a verdict sent to a person is not "sufficient".
            decision = route == "deliver" if route is not None else self.positive(result.verdict)
            self.sufficient += decision
            if route is not None:
                self.routes[route] = self.routes.get(route, 0) + 1
            model = self.model_positive(result.verdict)
            if model is not None:
                self.model_decided += 1
                self.overrides += model != decision
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
