"""Loaded by every Python process started with this folder on ``PYTHONPATH`` (the engine's processes, when
``bench_throughput.py`` measures where the time goes): wraps vLLM's functions there (``../breakdown.py``)."""

import os
import sys

if os.environ.get("SUFFICE_BREAKDOWN_DIR") or os.environ.get("SUFFICE_BREAKDOWN_BLOCKING_WAIT"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import breakdown

    breakdown.install()
