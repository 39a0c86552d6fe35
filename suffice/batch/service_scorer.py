"""Judging a run's batches through a running ``suffice serve`` (``suffice judge --server``), or through any
:class:`~suffice.config.JudgeProtocol` the caller gives ``judge_file(judge=...)``.

The service's engine is warm, so a small job costs its records' time, not an engine's
start.  The output, its resume and its settings check are the runner's, as for an engine in
this process: the service reports the settings that decide its rows (``GET
/v1/settings/{gate}``), and they are recorded and compared like an in-process run's, so an
output is never extended by a service with another model, backend, prompt or option.

The gate is built here without its options: they are sent with each request and resolved by
the service (its rubric store, its calibration files), while the rows are shaped and counted
from the verdicts, which carry every decision the options made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from suffice.batch.scoring import Crashed, Notify, Results, Scorer, _quiet
from suffice.config import JudgeConfig, JudgeProtocol
from suffice.exceptions import ConfigError, InvalidRequestError, ItemError, RequestTooLargeError
from suffice.gates import Gate, make_gate
from suffice.gates.roles import parse_item
from suffice.records.item import record_id
from suffice.results import ErrorInfo, JudgeResult
from suffice.rows.shaping import error_result
from suffice.serving.base import Progress
from suffice.serving.isolation import isolate
from suffice.settings import declared


def service_gate(config: JudgeConfig) -> Gate:
    """The gate that shapes and counts a service's rows: ``config``'s gate at its detail (options: the service's)."""
    return make_gate(config.gate, {}, config.detail)


def described(judge: JudgeProtocol) -> str:
    """How messages name ``judge``: a client by its service's address, any other by its kind."""
    base_url = getattr(judge, "base_url", None)
    return f"the service at {base_url}" if isinstance(base_url, str) else f"the {type(judge).__name__} given"


def request_options(judge: JudgeProtocol, config: JudgeConfig) -> dict[str, Any]:
    """What each call of ``judge`` carries for ``config``: its judge settings a request may set (declared
    ``per_request``: ``auto_margin``, the token budgets) where not their default, then the gate's options.  Another
    judge setting not at its default is a :class:`ConfigError` naming it: the judge decides it, and would judge
    without it (``detail`` excepted: :func:`service_settings` compares it with the judge's)."""
    sent = {}
    for setting in declared(type(config)):
        value = getattr(config, setting.name)
        if setting.is_default(value) or setting.name == "detail":
            continue
        if not setting.spec.per_request:
            raise ConfigError(
                setting.label,
                value,
                f"cannot be sent to {described(judge)} with a request: set it where the service starts",
            )
        sent[setting.name] = value
    return {**sent, **config.options}


def service_settings(judge: JudgeProtocol, config: JudgeConfig) -> dict[str, str]:
    """The settings of the rows ``judge`` gives for ``config``'s gate, options and judge settings a request may set
    (:func:`request_options`; its engine settings are the judge's, a service's through a client).  A gate the judge
    does not serve, an option it refuses, or a detail other than the judge's is a :class:`ConfigError` naming it."""
    options = request_options(judge, config)
    try:
        values = judge.settings_for(config.gate, options)
    except InvalidRequestError as exc:
        parameter = "gate" if exc.status == 404 else exc.field or "options"
        value = options.get(parameter, config.gate if parameter == "gate" else None)
        raise ConfigError(parameter, value, f"refused by {described(judge)}: {exc.detail}") from exc
    served = values.get("detail", "full")
    if served != config.detail:
        raise ConfigError(
            "detail",
            config.detail,
            f"{described(judge)} gives {served} verdicts (`suffice serve --detail` sets a service's): "
            f"judge with --detail {served}, or through a judge that gives {config.detail} verdicts",
        )
    return values


class ServiceScorer(Scorer):
    """Each batch is one ``judge_batch`` call of ``judge`` (a client's is one request to its service; closing the
    judge is its owner's business).

    A request the service refuses as a whole for what one record holds (a string or a list past its caps, a body
    over its limit: 422 or 413) is split in halves down to that record, which gets an error row naming the field;
    any other refusal (a wrong key, a service gone) stops the run with what is done on disk.
    """

    def __init__(
        self,
        judge: JudgeProtocol,
        gate: Gate,
        options: Mapping[str, Any],
        settings: Mapping[str, str],
        notify: Notify = _quiet,
    ) -> None:
        self.judge = judge
        self.gate = gate
        self.options = dict(options)
        self._model = settings.get("model", "")
        self._backend = settings.get("backend", "")
        self._notify = notify
        self._started = False

    def map(self, batches: Iterator[list[object]], progress: Progress | None, crashed: Crashed = None) -> Results:
        for batch in batches:
            if not self._started:
                self._notify(f"judging through {described(self.judge)} (model {self._model}, backend {self._backend})")
                self._started = True
            results: list[JudgeResult | None] = [self._unsendable(record) for record in batch]
            sent = [index for index, result in enumerate(results) if result is None]
            judged = isolate(self._request, [batch[index] for index in sent], self._refused)
            for index, result in zip(sent, judged, strict=True):
                results[index] = result
            if progress is not None:
                progress(len(batch))
            yield [result for result in results if result is not None]

    def _request(self, records: Sequence[object]) -> list[JudgeResult]:
        return self.judge.judge_batch(records, gate=self.gate.name, options=self.options or None)

    def _unsendable(self, record: object) -> JudgeResult | None:
        """The error row of a record that cannot be sent as JSON (a line that is not JSON, a Parquet value JSON
        cannot hold), with the error the in-process judge gives it where it gives one; else ``None``."""
        try:
            json.dumps(record)
        except (TypeError, ValueError) as exc:
            try:
                parse_item(self.gate, record)
            except ItemError as invalid:
                return self._error_row(record, ErrorInfo.from_exception(invalid))
            message = f"cannot be sent to the service as JSON: {exc}"
            return self._error_row(record, ErrorInfo(type="InputError", message=message, field="record"))
        return None

    def _refused(self, exc: Exception, records: Sequence[object]) -> JudgeResult:
        """The error row of a record the service refuses alone (422, 413); any other failure is raised."""
        refused = isinstance(exc, RequestTooLargeError) or (isinstance(exc, InvalidRequestError) and exc.status == 422)
        if not refused:
            raise exc
        field = exc.field if isinstance(exc, InvalidRequestError) and exc.field != "body" else None
        return self._error_row(
            records[0], ErrorInfo(type=type(exc).__name__, message=f"refused by the service: {exc}", field=field)
        )

    def _error_row(self, record: object, error: ErrorInfo) -> JudgeResult:
        """A row made here, not by the service: the model and backend are those its settings name."""
        return error_result(record_id(record), self.gate, self._model, self._backend, error)
