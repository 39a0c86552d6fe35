"""The vLLM engine, as the openai engine is a package: engine.py (requests, outputs), driver.py (its batching
loop), lifecycle.py (start, liveness, shutdown); with the engine the only modules that import vLLM."""
