"""The review queue in ``/metrics``: read from the audit log at each scrape, so decisions from
``suffice review decide`` count too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from suffice.audit import AuditLog
from suffice.server.reviews.desk import ReviewDesk


class ReviewCounts:
    """``suffice_reviews`` (per gate, rule and status) and ``suffice_review_overrides_total`` (per gate and rule:
    resolved reviews whose people's label differs from the machine's)."""

    def __init__(self, desk: ReviewDesk) -> None:
        self.desk = desk

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        reviews = GaugeMetricFamily("suffice_reviews", "Reviews in the queue", labels=["gate", "rule", "status"])
        overrides = CounterMetricFamily(
            "suffice_review_overrides",
            "Resolved reviews whose people's label differs from the machine's",
            labels=["gate", "rule"],
        )
        try:
            counts = self.desk.call(AuditLog.review_counts)
        except Exception:  # a scrape never fails for the log: the other metrics still go out
            counts = []
        per: dict[tuple[str, str], int] = {}
        for c in counts:
            gate, rule = str(c["gate"] or ""), str(c["rule"] or "")
            reviews.add_metric([gate, rule, str(c["status"])], c["count"])
            per[gate, rule] = per.get((gate, rule), 0) + c["overrides"]
        for (gate, rule), count in per.items():
            overrides.add_metric([gate, rule], count)
        yield reviews
        yield overrides
