"""Switch off every hub download and usage report before transformers, vLLM or Ray is imported.

Why on import: ``huggingface_hub`` reads these variables once, when it is first
imported, so they must be set before anything else touches it.  suffice only
loads local folders; a run that tried the network would hang in an air-gapped room.
Ray reports usage statistics to a public host by default (its first report a minute
after start): off here, before any ``ray.init``, with the prompt that asks about it.
Haystack reports usage to PostHog from every pipeline run unless its switch is off when
it is first imported: off here (:mod:`suffice.integrations.haystack` also drops the
telemetry of a Haystack imported before suffice).
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
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    "HAYSTACK_TELEMETRY_ENABLED": "False",
}


def force_offline() -> None:
    os.environ.update(OFFLINE_ENV)
