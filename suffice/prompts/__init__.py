"""Prompt templates (files rendered with Jinja2 StrictUndefined) and context fitting."""

from suffice.prompts.fitting import FittedPrompt, ShownChunk, fit_prompt
from suffice.prompts.templates import PromptTemplate, load_prompt

__all__ = ["FittedPrompt", "PromptTemplate", "ShownChunk", "fit_prompt", "load_prompt"]
