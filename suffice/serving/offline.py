"""Switch off every hub download before transformers or vLLM is imported.

Why on import: ``huggingface_hub`` reads these variables once, when it is first
imported, so they must be set before anything else touches it.  suffice only
loads local folders; a run that tried the network would hang in an air-gapped room.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def force_offline() -> None:
    os.environ.update(OFFLINE_ENV)
