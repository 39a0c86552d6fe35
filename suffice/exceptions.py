"""Every error suffice raises on purpose derives from :class:`SufficeError`.

The tree::

    SufficeError
    ├── ConfigError                 a setting is invalid (names the parameter and value)
    ├── ModelNotFoundError          the model is not a local folder (names the path)
    ├── EngineError                 the engine failed to start or to generate
    └── ItemError                   one item cannot be judged; becomes one error record
        ├── InputError              a record field is missing or invalid (names the field)
        │   └── RubricError         a rubric is unknown or fails its schema (names the field)
        ├── PromptTooLongError      the prompt cannot be fitted into the context window
        ├── GenerationError         the engine failed on this item alone
        └── VerdictError            the model's text failed parsing or validation twice
                                    (keeps the raw text)

``ItemError`` subclasses never stop a batch: the judge turns each into an error
record for its item and the other items still get verdicts.
"""

from __future__ import annotations


class SufficeError(Exception):
    """Root of suffice's exceptions."""


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


class ItemError(SufficeError):
    """An error confined to one item of a batch."""

    field: str | None = None


class InputError(ItemError, ValueError):
    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class RubricError(InputError):
    pass


class PromptTooLongError(ItemError):
    def __init__(self, message: str) -> None:
        self.field = "chunks"
        super().__init__(message)


class GenerationError(ItemError):
    pass


class VerdictError(ItemError):
    def __init__(self, message: str, raw_text: str) -> None:
        self.raw_text = raw_text
        super().__init__(message)
