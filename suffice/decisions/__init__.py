"""Decisions computed in code from verdicts: deterministic, auditable, no model call."""
