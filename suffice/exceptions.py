"""Every error suffice raises on purpose derives from :class:`SufficeError`.

The tree::

    SufficeError
    ├── ConfigError                 a setting is invalid (names the parameter and value)
    ├── ModelNotFoundError          the model is not a local folder (names the path)
    ├── MissingExtraError           a module only an extra installs is missing (names the extra to install)
    ├── EngineError                 the engine failed to start or to generate
    │   ├── PartialBatchError       some requests of a batch failed alone; carries each outcome
    │   └── EngineFatalError        no request can succeed on this engine: stop, keep what is done
    │       ├── EngineDeadError     the engine process or server is gone: rerun to resume
    │       │   └── EngineUnreachableError  a server cannot be reached or says it is unhealthy
    │       └── ConstraintNotEnforcedError  a server returned text outside the constraint
    ├── AuditError                  an audit database or anchor cannot be used as asked
    │   ├── AuditBrokenError        the chains do not verify (``audit anchor`` exits 4, not 2)
    │   ├── ReviewNotFoundError     no review has that id (404)
    │   └── ReviewConflictError     the review is resolved already, or this reviewer decided it (409)
    ├── OutputMismatchError         an existing output has other settings, or is the input (exit 2)
    ├── OutputWriteError            an output file cannot be written: stop, rerun to resume
    ├── OutputBusyError             another suffice run is writing that output
    ├── CitationError               a citation marker is not in the escaped form suffice writes
    ├── CancelledError              the caller withdrew the request; its generation was stopped
    ├── InsufficientContextError    an integration's gate judged the documents insufficient (carries the verdict,
    │                               what is missing and the queries to retrieve it)
    ├── GateFailedError             an integration's gate gave no verdict for the documents (carries the error row)
    ├── ServiceError                a ``suffice serve`` service refused or failed a client's request
    │   ├── AuthenticationError     401: no bearer token, or a wrong one
    │   ├── RequestTooLargeError    413: the body is over the service's limit
    │   ├── InvalidRequestError     422 (and 404, 415): the request is malformed (names the field)
    │   ├── ServiceTimeoutError     504, or no answer within the client's timeout
    │   └── ServiceUnavailableError 429 or 503 still, after the bounded retries, or no connection
    └── ItemError                   one item cannot be judged; becomes one error record
        ├── InputError              a record field is missing or invalid (names the field)
        │   └── RubricError         a rubric is unknown or fails its schema (names the field)
        ├── PromptTooLongError      the prompt cannot be fitted into the context window
        ├── PreparationError        an unexpected failure while preparing this record
        ├── GenerationError         the engine failed on this item alone (not final: rerun judges it)
        ├── VerdictError            the model's text failed parsing or validation twice
        └── StepError               a harness step failed for one question; it goes to review
            ├── RetrievalError
            └── RewriteError

An ``ItemError`` never stops a batch (its item gets an error record); ``EngineFatalError`` always does.

What each error means to its caller (the command's exit status, the service's HTTP status, what to do next) is
written once, in :data:`STATUS` at the end; ``suffice``'s commands and ``suffice serve`` both read it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: Exit statuses of the ``suffice`` command (documented in README.md); each error carries its own in :data:`STATUS`.
EXIT_OK = 0  #: every record got a verdict
EXIT_FATAL = 1  #: nothing more could be judged: model missing, engine failed, unreadable output
EXIT_USAGE = 2  #: bad arguments or settings
EXIT_ITEM_ERRORS = 3  #: the run finished, but some records got error lines instead of verdicts
#: another suffice run is writing the output: nothing was read or written; the same command works once that
#: run has ended (a script can wait and retry on it, where 1 and 2 need a person).
EXIT_BUSY = 4
#: ``audit verify``/``audit anchor``: the log's chains do not verify (tampered).
EXIT_TAMPERED = 4
#: ``audit verify``: the log is intact but unkeyed, so only accidental edits were checked.
EXIT_UNKEYED = 5


def _rebuild(cls: type[SufficeError], args: tuple[Any, ...], state: dict[str, Any]) -> SufficeError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


class SufficeError(Exception):
    """Root of suffice's exceptions; each pickles with its fields, so it crosses a Ray actor intact."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class CalibrationMismatchWarning(UserWarning):
    """A calibrated threshold is used under other engine settings (model, weights, backend, dtype) than it was
    fitted under: the message names each with both values.  Calibrate again under the engine in use."""


class ConfigError(SufficeError, ValueError):
    def __init__(self, parameter: str, value: object, reason: str) -> None:
        self.parameter = parameter
        self.value = value
        super().__init__(f"{parameter}={value!r}: {reason}")


class ModelNotFoundError(SufficeError, FileNotFoundError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"model {path!r}: {reason}")


class MissingExtraError(SufficeError, ImportError):
    """What was asked for needs ``module``, not installed; ``extras``: suffice's extras that install it (``()``:
    a broken install).  The message says the command that installs it (:mod:`suffice.serving.extras`)."""

    def __init__(self, module: str, extras: tuple[str, ...], message: str) -> None:
        self.module = module
        self.extras = extras
        super().__init__(message, name=module)


class EngineError(SufficeError, RuntimeError):
    pass


class CitationError(SufficeError, ValueError):
    """A ``[CITATION:...]`` marker whose source id is not validly escaped (read back from an export)."""

    def __init__(self, marker: str, reason: str) -> None:
        self.marker = marker
        super().__init__(f"{marker!r}: {reason}")


class PartialBatchError(EngineError):
    """Some requests of one ``generate`` call failed alone: ``outcomes[i]`` is request ``i``'s
    ``Generation`` or its :class:`EngineError`."""

    def __init__(self, message: str, outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        super().__init__(message)


class EngineFatalError(EngineError):
    """No request can succeed on this engine: callers stop and keep what is done; no item gets an error record."""


class EngineDeadError(EngineFatalError):
    """The engine's process died or its server cannot be reached; rerunning once it is back resumes."""


class EngineUnreachableError(EngineDeadError):
    """A server cannot be reached or reports itself unhealthy; no record is suspected of it."""


class ConstraintNotEnforcedError(EngineFatalError):
    """A server answered with text outside the constraint it was sent, so none of its verdicts can be
    trusted.  ``segment`` names the pattern's key."""

    def __init__(self, segment: str, message: str) -> None:
        self.segment = segment
        super().__init__(message)


class CancelledError(SufficeError):
    """The caller set the request's cancel event; its generation was stopped and nothing is returned."""


class InsufficientContextError(SufficeError):
    """A framework integration's gate judged the retrieved documents insufficient (``on_insufficient="raise"``).

    ``missing``: what the verdict says is missing; ``queries``: what to retrieve next; ``result``: the
    :class:`~suffice.JudgeResult`; ``routing``: its :class:`~suffice.Routing`."""

    def __init__(self, question: str, missing: list[str], queries: list[str], result: Any, routing: Any) -> None:
        self.question = question
        self.missing = missing
        self.queries = queries
        self.result = result
        self.routing = routing
        gap = "; ".join(missing) if missing else "the verdict names no gap"
        super().__init__(f"the documents are not sufficient to answer {question[:80]!r}: {gap}")


class GateFailedError(SufficeError):
    """A framework integration's gate gave no verdict for the documents (``on_error="raise"``): ``result`` is the
    record's error row.  Retry, or pass ``on_error="keep"`` to let the documents through unjudged."""

    def __init__(self, result: Any) -> None:
        self.result = result
        error = getattr(result, "error", None)
        why = f"{error.type}: {error.message}" if error is not None else "no error row"
        super().__init__(f"the gate gave no verdict: {why}")


class ServiceError(SufficeError):
    """A ``suffice serve`` service refused or failed a request of :class:`~suffice.Client`; ``status`` is
    the HTTP status (``None``: no answer), ``detail`` the service's own words."""

    def __init__(self, detail: str, status: int | None = None) -> None:
        self.detail = detail
        self.status = status
        super().__init__(detail if status is None else f"HTTP {status}: {detail}")


class AuthenticationError(ServiceError):
    """401: the service wants a bearer token (``api_key``) and got none, or a wrong one."""


class RequestTooLargeError(ServiceError):
    """413: the request's body is over the service's limit: send fewer items per call."""


class InvalidRequestError(ServiceError, ValueError):
    """422 (or 404, 415): the service refused the request as malformed; ``field`` names where (``None``: not said).
    Where a judge in process would raise its own error, a client raises that one from this (:func:`refused_as`)."""

    def __init__(self, detail: str, status: int | None = None, field: str | None = None) -> None:
        self.field = field
        super().__init__(detail, status)


class ServiceTimeoutError(ServiceError, TimeoutError):
    """504, or no answer within the client's ``timeout``: the service stops that request's generation."""


class ServiceUnavailableError(ServiceError):
    """429 or 503 after the client's bounded retries, or a service that cannot be reached."""


class OutputMismatchError(SufficeError):
    """An output file cannot be resumed with these settings (``setting`` names the first that differs)."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


class OutputWriteError(SufficeError):
    """A file could not be written: the run stops and what was written stays (a torn last line is cut on resume)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")


class ExportWriteError(OutputWriteError):
    """A file written whole or not at all (an audit export, review labels) could not be written: none of it was
    written, so there is nothing to resume; the command must name another path, or room be made."""


class BundleWriteError(OutputWriteError):
    """An air-gap bundle's folder could not be written: a bundle is written anew each time, so there is nothing to
    resume; room made, the same command writes it again."""


class OutputBusyError(SufficeError):
    """Another suffice run holds the lock beside an output (``OUTPUT.lock``), so this one is refused before
    it reads or writes.  ``path`` names the output, ``pid`` the holder (``None`` when unknown)."""

    def __init__(self, path: str, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        who = "another suffice run" if pid is None else f"another suffice run (pid {pid})"
        super().__init__(f"{who} is writing {path}; rerun once it has ended, or write to another -o")


class AuditError(SufficeError):
    """The audit log refuses an operation (older format, broken head when appending, unstorable value,
    unreadable anchor); tampering found by ``verify`` is a report, not this error."""


class AuditBrokenError(AuditError):
    """:meth:`~suffice.audit.AuditLog.anchor` found the chains broken (``reason`` says where); unlike other
    AuditErrors, evidence of tampering (exit 4, not 2)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refusing to anchor {path}: {reason}")


class ReviewNotFoundError(AuditError):
    """No review in the audit log has the id asked for."""


class ReviewConflictError(AuditError):
    """The review cannot take this decision: it is resolved already, or this reviewer decided it already."""


class ItemError(SufficeError):
    """An error confined to one item of a batch."""

    field: str | None = None
    #: Whether the error line is the record's answer; a resumed run judges non-final ones again.
    final: bool = True


class InputError(ItemError, ValueError):
    def __init__(self, field: str, message: str) -> None:
        self.field = field
        #: The message without the field's name in front.
        self.reason = message
        super().__init__(f"{field}: {message}")


class VerdictsFileError(InputError):
    """The verdicts a calibration wrote before cannot be read back as rows of its gate (``field`` names the file):
    they must be judged again."""


class RubricError(InputError):
    pass


class PromptTooLongError(ItemError):
    def __init__(self, message: str) -> None:
        self.field = "chunks"
        super().__init__(message)


class PreparationError(ItemError):
    """Anything unexpected raised while parsing, fitting or tokenizing one record."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class GenerationError(ItemError):
    """The engine failed on this request alone; not final, so a resumed run judges the record again."""

    final = False


class VerdictError(ItemError):
    def __init__(self, message: str, raw_text: str) -> None:
        self.raw_text = raw_text
        super().__init__(message)


class StepError(ItemError):
    """A harness step failed for one question, which goes to review; ``step`` names it, ``detail`` says why."""

    step: str = "step"

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self.step} failed: {detail}")


class RetrievalError(StepError):
    """The retriever raised, returned the wrong number of results, or a malformed chunk."""

    step = "retrieval"


class RewriteError(StepError):
    """Query rewriting raised or returned the wrong number of results."""

    step = "rewrite"


class Status(NamedTuple):
    """What an error means: ``exit``, the ``suffice`` command's exit status; ``http``, the status ``suffice serve``
    answers with; ``then``, what the caller can do, said after the message ("" when the message says it)."""

    exit: int
    http: int
    then: str = ""


_RESUME_ONCE_ANSWERED = "rerun the same command to resume once the service answers"

#: Every suffice error's :class:`Status`: the one table the command line and the service read (a test checks
#: that each class is here).  An error outside it is looked up by its nearest listed base class.
STATUS: dict[type[SufficeError], Status] = {
    SufficeError: Status(EXIT_FATAL, 500),
    ConfigError: Status(EXIT_USAGE, 500),  # the service's own settings: not the client's fault
    ModelNotFoundError: Status(EXIT_FATAL, 500),
    MissingExtraError: Status(EXIT_USAGE, 500),  # the install, not the request: the message names the extra
    EngineError: Status(EXIT_FATAL, 500),
    PartialBatchError: Status(EXIT_FATAL, 500),
    EngineFatalError: Status(EXIT_FATAL, 503),
    EngineDeadError: Status(EXIT_FATAL, 503),
    EngineUnreachableError: Status(EXIT_FATAL, 503),
    ConstraintNotEnforcedError: Status(EXIT_FATAL, 503),
    AuditError: Status(EXIT_USAGE, 503),
    AuditBrokenError: Status(EXIT_TAMPERED, 503),
    ReviewNotFoundError: Status(EXIT_USAGE, 404),
    ReviewConflictError: Status(EXIT_FATAL, 409),
    OutputMismatchError: Status(EXIT_USAGE, 500),
    OutputWriteError: Status(EXIT_FATAL, 500, "fix the cause, then rerun the same command to resume"),
    ExportWriteError: Status(EXIT_USAGE, 500),
    BundleWriteError: Status(EXIT_FATAL, 500),
    OutputBusyError: Status(EXIT_BUSY, 409),
    CitationError: Status(EXIT_FATAL, 500),
    CancelledError: Status(EXIT_FATAL, 499),
    InsufficientContextError: Status(EXIT_FATAL, 500),
    GateFailedError: Status(EXIT_FATAL, 500),
    ServiceError: Status(EXIT_FATAL, 502, _RESUME_ONCE_ANSWERED),
    AuthenticationError: Status(EXIT_USAGE, 401),  # the message says where the key was read from
    RequestTooLargeError: Status(EXIT_FATAL, 413, "lower --batch-size, then rerun the same command to resume"),
    InvalidRequestError: Status(EXIT_FATAL, 422, _RESUME_ONCE_ANSWERED),
    ServiceTimeoutError: Status(EXIT_FATAL, 504, _RESUME_ONCE_ANSWERED),
    ServiceUnavailableError: Status(EXIT_FATAL, 503, _RESUME_ONCE_ANSWERED),
    ItemError: Status(EXIT_FATAL, 500),
    InputError: Status(EXIT_USAGE, 422),
    RubricError: Status(EXIT_USAGE, 422),
    VerdictsFileError: Status(EXIT_FATAL, 422, "judge again with --overwrite"),
    PromptTooLongError: Status(EXIT_FATAL, 422),
    PreparationError: Status(EXIT_FATAL, 500),
    GenerationError: Status(EXIT_FATAL, 500),
    VerdictError: Status(EXIT_FATAL, 500),
    StepError: Status(EXIT_FATAL, 500),
    RetrievalError: Status(EXIT_FATAL, 500),
    RewriteError: Status(EXIT_FATAL, 500),
}


def status_of(error: SufficeError) -> Status:
    """``error``'s :class:`Status`: its class's entry in :data:`STATUS`, else its nearest listed base class's."""
    return STATUS[next(cls for cls in type(error).__mro__ if cls in STATUS)]


def listed_name(error: SufficeError) -> str:
    """The name of ``error``'s nearest class in :data:`STATUS`: how a refusal's body names its type, so that a
    client finds the class in the same table (:func:`refused_as`)."""
    return next(cls.__name__ for cls in type(error).__mro__ if cls in STATUS)


def refused_as(name: object, field: str, message: str, value: object = None) -> SufficeError | None:
    """The :class:`ConfigError` or :class:`InputError` a judge in process raises for the mistake a service refused,
    rebuilt from the refusal (``name``: the class in :data:`STATUS`; ``field``, ``message``: ``"FIELD: ..."``,
    ``value``: what the caller sent); ``None`` for any other name, which stays the client's :class:`ServiceError`."""
    cls = next((listed for listed in STATUS if listed.__name__ == name), None)
    reason = message.removeprefix(f"{field}: ")
    if cls is not None and issubclass(cls, ConfigError):
        # Worded as ConfigError words it, "FIELD=VALUE: why", where the service's words are not already.
        said = reason if reason.startswith(f"{field}=") else f"{field}={value!r}: {reason}"
        return _rebuild(cls, (said,), {"parameter": field, "value": value})
    if cls is not None and issubclass(cls, InputError):
        return _rebuild(cls, (f"{field}: {reason}",), {"field": field, "reason": reason})
    return None
