"""Every error suffice raises on purpose derives from :class:`SufficeError`.

The tree::

    SufficeError
    ├── ConfigError                 a setting is invalid (names the parameter and value)
    ├── ModelNotFoundError          the model is not a local folder (names the path)
    ├── EngineError                 the engine failed to start or to generate (a batch
    │   │                           that fails is split so one request fails alone)
    │   ├── PartialBatchError       some requests of a batch failed on their own; carries
    │   │                           each request's outcome, so nothing is split or resent
    │   └── EngineFatalError        no request can succeed on this engine: stop, keep what
    │       │                       is done (never an error line for an item)
    │       ├── EngineDeadError     the engine process or server is gone: rerun to resume
    │       │   └── EngineUnreachableError  a server cannot be reached or says it is
    │       │                       unhealthy (no request is known to have caused it)
    │       └── ConstraintNotEnforcedError  a server returned text outside the constraint
    │                               (it ignores the constraint field): fix the server
    ├── AuditError                  an audit database or anchor cannot be used as asked
    │                               (older format, broken chain when writing, bad value)
    │   └── AuditBrokenError        the chains do not verify, so the log is not anchored
    │                               (tampering: ``audit anchor`` exits 4, not 2)
    ├── OutputMismatchError         an existing output was written with other settings, or
    │                               is the input itself (names the setting; exit 2)
    ├── OutputWriteError            an output file cannot be written (a full disk): stop,
    │                               keep what is written, rerun to resume once there is room
    ├── OutputBusyError             another suffice run is writing that output (names its
    │                               pid when known): nothing done; rerun once it has ended
    ├── CitationError               a citation marker is not in the escaped form suffice writes
    ├── CancelledError              the caller withdrew the request (a timeout, a client
    │                               that hung up): its generation was stopped
    └── ItemError                   one item cannot be judged; becomes one error record
        ├── InputError              a record field is missing or invalid (names the field)
        │   └── RubricError         a rubric is unknown or fails its schema (names the field)
        ├── PromptTooLongError      the prompt cannot be fitted into the context window
        ├── PreparationError        an unexpected failure while preparing this record
        ├── GenerationError         the engine failed on this item alone (not final:
        │                           a rerun judges it again)
        ├── VerdictError            the model's text failed parsing or validation twice
        │                           (keeps the raw text)
        └── StepError               a harness step failed for one question (names the step);
            ├── RetrievalError      the pipeline sends that question alone to review
            └── RewriteError

``ItemError`` subclasses never stop a batch: the judge turns each into an error
record for its item and the other items still get verdicts.  ``EngineFatalError``
always stops it: no item is to blame, so none gets an error record for it.  The
pipeline turns a ``StepError`` into a review outcome for its question alone.
"""

from __future__ import annotations

from typing import Any


def _rebuild(cls: type[SufficeError], args: tuple[Any, ...], state: dict[str, Any]) -> SufficeError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


class SufficeError(Exception):
    """Root of suffice's exceptions.

    Every one pickles with its fields (``parameter``, ``field``, ...), whatever its
    ``__init__`` takes: an error raised inside a Ray actor reaches the driver as itself,
    so a ``ConfigError`` still names its parameter there.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class ConfigError(SufficeError, ValueError):
    def __init__(self, parameter: str, value: object, reason: str) -> None:
        self.parameter = parameter
        self.value = value
        super().__init__(f"{parameter}={value!r}: {reason}")


class ModelNotFoundError(SufficeError, FileNotFoundError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"model {path!r}: {reason}")


class EngineError(SufficeError, RuntimeError):
    pass


class CitationError(SufficeError, ValueError):
    """A ``[CITATION:...]`` marker whose source id is not validly escaped.

    Raised when reading an exported answer back, so that a damaged marker is
    reported instead of being read as some other source.
    """

    def __init__(self, marker: str, reason: str) -> None:
        self.marker = marker
        super().__init__(f"{marker!r}: {reason}")


class PartialBatchError(EngineError):
    """Some requests of one ``generate`` call failed, each on its own (an engine that sends
    one call per request knows which): ``outcomes[i]`` is request ``i``'s ``Generation``
    or its :class:`EngineError`, so the caller keeps the answers and splits nothing."""

    def __init__(self, message: str, outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        super().__init__(message)


class EngineFatalError(EngineError):
    """No request can succeed on this engine as it is: callers stop and keep what is
    done.  No item is to blame, so none gets an error record for it."""


class EngineDeadError(EngineFatalError):
    """The engine's process died (killed, out of memory, crashed) or its server cannot
    be reached: nothing more can be generated by it.  Rerunning once it is back resumes."""


class EngineUnreachableError(EngineDeadError):
    """A server cannot be reached, or reports itself unhealthy: gone for now, but
    nothing says a request in flight caused it, so no record is suspected of it."""


class ConstraintNotEnforcedError(EngineFatalError):
    """A server answered with text outside the constraint it was sent: it does not
    enforce it (an engine without structured outputs, or a field it ignores), so no
    verdict from it could be trusted.  ``segment`` names the pattern's key."""

    def __init__(self, segment: str, message: str) -> None:
        self.segment = segment
        super().__init__(message)


class CancelledError(SufficeError):
    """The caller set the request's cancel event (``suffice serve``: a request past its
    timeout, a client that disconnected); its generation was stopped and nothing is
    returned for it."""


class OutputMismatchError(SufficeError):
    """An output file cannot be resumed with these settings (``setting`` names the first
    that differs)."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(message)


class OutputWriteError(SufficeError):
    """A file suffice writes could not be written (no space left, no permission, an I/O
    error): the run stops.  What was written before stays: a torn last line is cut when
    the run resumes, and a file being replaced is left as it was, with no temporary
    file beside it.  ``path`` names the file, ``reason`` the system's message."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")


class OutputBusyError(SufficeError):
    """Another suffice run holds the lock beside an output (``OUTPUT.lock``): two runs
    appending to and rewriting one file lose and double rows (each rewrite drops the
    other's appended rows), so the second is refused before it reads or writes
    anything.  ``path`` names the output, ``pid`` the run holding it (``None`` when
    the lock file does not say).  The lock goes with its process, a killed one too:
    rerun once that run has ended."""

    def __init__(self, path: str, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        who = "another suffice run" if pid is None else f"another suffice run (pid {pid})"
        super().__init__(f"{who} is writing {path}; rerun once it has ended, or write to another -o")


class AuditError(SufficeError):
    """The audit log refuses an operation: a database of an older format, a chain
    whose head no longer verifies when appending, a value that cannot be stored
    exactly, an unreadable anchor.  Tampering found by ``verify`` is a report, not
    this error."""


class AuditBrokenError(AuditError):
    """:meth:`~suffice.audit.AuditLog.anchor` found the chains broken (``reason``
    says where) and refuses to certify them.  A type of its own because the other
    AuditErrors (a damaged file, a lock held too long) are no evidence of tampering
    (``verify`` exits 2 for them, not 4)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refusing to anchor {path}: {reason}")


class ItemError(SufficeError):
    """An error confined to one item of a batch."""

    field: str | None = None
    #: Whether the error line is the record's answer (the record is at fault); a resumed
    #: run judges records with non-final error lines again.
    final: bool = True


class InputError(ItemError, ValueError):
    def __init__(self, field: str, message: str) -> None:
        self.field = field
        #: The message without the field's name in front.
        self.reason = message
        super().__init__(f"{field}: {message}")


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
    """The engine failed on this request alone (it was isolated by splitting the batch).

    Not final: the engine, not the record, may be at fault, so a resumed run judges
    the record again.
    """

    final = False


class VerdictError(ItemError):
    def __init__(self, message: str, raw_text: str) -> None:
        self.raw_text = raw_text
        super().__init__(message)


class StepError(ItemError):
    """A harness step failed for one question: its retrieval or its query rewriting.

    Confined to that question (it goes to review with this message as the reason);
    ``step`` names the step, ``detail`` says what went wrong.
    """

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
