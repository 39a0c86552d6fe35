"""suffice: local, air-gapped evidence gates for RAG with verdicts valid by construction.

What users import is here (and in :mod:`suffice.batch`); the modules behind these names
are internal and may move.  Importing suffice changes nothing of the process (its environment,
logging, warnings filters, signal handlers, asyncio policy; tests/test_import_side_effects.py):
models are local folders, and hub downloads are switched off where suffice loads one
(:mod:`suffice.serving.offline`), not on import.
"""

import logging as _logging

# A library logs and never prints: without a handler of the application's, nothing is shown.
_logging.getLogger("suffice").addHandler(_logging.NullHandler())

from suffice.client import AsyncClient, Client  # noqa: E402
from suffice.config import JudgeConfig, JudgeProtocol  # noqa: E402
from suffice.exceptions import (  # noqa: E402
    AuditError,
    AuthenticationError,
    CalibrationMismatchWarning,
    CancelledError,
    ConfigError,
    EngineDeadError,
    EngineError,
    EngineFatalError,
    GateFailedError,
    GenerationError,
    InputError,
    InsufficientContextError,
    InvalidRequestError,
    ItemError,
    ModelNotFoundError,
    OutputBusyError,
    OutputMismatchError,
    OutputWriteError,
    PromptTooLongError,
    RequestTooLargeError,
    ServiceError,
    ServiceTimeoutError,
    ServiceUnavailableError,
    SufficeError,
    VerdictError,
)
from suffice.gates import (  # noqa: E402
    CalibrationChoice,
    Gate,
    GateOptions,
    Verdict,
    gate_class,
    gate_names,
    make_gate,
)
from suffice.grammars.constraint import Constraint, Segment  # noqa: E402
from suffice.grammars.routes import Routing  # noqa: E402
from suffice.harness.pipeline import Pipeline, PipelineConfig  # noqa: E402
from suffice.harness.retrieval import FunctionRetriever  # noqa: E402
from suffice.judge import Judge  # noqa: E402
from suffice.prompts.fitting import FittedPrompt  # noqa: E402
from suffice.prompts.templates import PromptTemplate, load_prompt  # noqa: E402
from suffice.records.item import Chunk, Item  # noqa: E402
from suffice.results import JudgeResult  # noqa: E402
from suffice.rows.row_types import result_row_model, result_row_schema  # noqa: E402
from suffice.serving.engine_config import EngineConfig  # noqa: E402
from suffice.settings import setting  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "AsyncClient",
    "AuditError",
    "AuthenticationError",
    "CalibrationChoice",
    "CalibrationMismatchWarning",
    "CancelledError",
    "Chunk",
    "Client",
    "ConfigError",
    "Constraint",
    "EngineConfig",
    "EngineDeadError",
    "EngineError",
    "EngineFatalError",
    "FittedPrompt",
    "FunctionRetriever",
    "Gate",
    "GateFailedError",
    "GateOptions",
    "GenerationError",
    "InputError",
    "InsufficientContextError",
    "InvalidRequestError",
    "Item",
    "ItemError",
    "Judge",
    "JudgeConfig",
    "JudgeProtocol",
    "JudgeResult",
    "ModelNotFoundError",
    "OutputBusyError",
    "OutputMismatchError",
    "OutputWriteError",
    "Pipeline",
    "PipelineConfig",
    "PromptTemplate",
    "PromptTooLongError",
    "RequestTooLargeError",
    "Routing",
    "Segment",
    "ServiceError",
    "ServiceTimeoutError",
    "ServiceUnavailableError",
    "SufficeError",
    "Verdict",
    "VerdictError",
    "__version__",
    "gate_class",
    "gate_names",
    "load_prompt",
    "make_gate",
    "result_row_model",
    "result_row_schema",
    "setting",
]
