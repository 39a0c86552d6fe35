"""suffice: local, air-gapped evidence gates for RAG with verdicts valid by construction.

Importing suffice switches off every model-hub download for this process (see
:mod:`suffice.serving.offline`); models are local folders.
"""

from suffice.serving.offline import force_offline

force_offline()

from suffice.config import JudgeConfig  # noqa: E402
from suffice.exceptions import SufficeError  # noqa: E402
from suffice.judge import Judge  # noqa: E402
from suffice.results import JudgeResult  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Judge", "JudgeConfig", "JudgeResult", "SufficeError", "__version__"]
