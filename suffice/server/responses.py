"""The service's JSON answers: the response class every route uses, and the named shapes of its refusals and
probes as the OpenAPI document gives them."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Literal

from fastapi.responses import JSONResponse as _Utf8JSONResponse
from pydantic import BaseModel, Field

from suffice.exceptions import SufficeError, listed_name

Location = list[str | int]


class JSONResponse(_Utf8JSONResponse):
    """JSON whose strings UTF-8 cannot hold (lone surrogates) written as escapes, where Starlette's raises."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def unprocessable(location: Location, message: str, error: SufficeError | None = None) -> JSONResponse:
    """422 in FastAPI's own shape, so clients parse one error format; ``error``: the error a judge in process
    raises for the same mistake, named in the entry so that a client raises it too."""
    entry: dict[str, Any] = {"loc": location, "msg": message, "type": "value_error"}
    if error is not None:
        entry["error"] = listed_name(error)
    return JSONResponse({"detail": [entry]}, status_code=422)


def refused(
    status: int, detail: str, headers: dict[str, str] | None = None, error: SufficeError | None = None
) -> JSONResponse:
    """Any other refusal: ``{"detail": ...}``, with ``error`` named as :func:`unprocessable` names it (and the
    field it names)."""
    body: dict[str, Any] = {"detail": detail}
    if error is not None:
        body["error"] = listed_name(error)
        body["field"] = getattr(error, "parameter", None) or getattr(error, "field", None)
    return JSONResponse(body, status_code=status, headers=headers)


_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def public_model_name(model_id: str) -> str:
    """``model_id`` if it is a model's name (``Qwen/Qwen3-8B``), else its folder's last part:
    where the server keeps its files is no client's business."""
    pathlike = (
        model_id.startswith(("/", ".", "~"))
        or "\\" in model_id
        or model_id.count("/") > 1
        or bool(_WINDOWS_DRIVE.match(model_id))
        or os.path.exists(model_id)
    )
    if not pathlike:
        return model_id
    parts = [part for part in re.split(r"[\\/]", model_id) if part]
    return parts[-1] if parts else "model"


_ERROR = (
    "the suffice error a judge in process raises for the same mistake (ConfigError, RubricError, ...): "
    "suffice's clients raise it too"
)


class Error(BaseModel):
    """A refusal: what went wrong (``status`` on a 503 while the engine starts; ``error_id`` on a 500, to find
    the cause in the server's log)."""

    detail: str
    status: str | None = None
    error_id: str | None = None
    error: str | None = Field(default=None, description=_ERROR)
    field: str | None = Field(default=None, description="the option or field that ``error`` names")


class FieldError(BaseModel):
    """One value refused: where it is (``["body", "items", 3, "question"]``, ``["query", "rubric"]``) and why."""

    loc: list[str | int]
    msg: str
    type: str
    error: str | None = Field(default=None, description=_ERROR)


class ValidationErrors(BaseModel):
    """A 422: the values refused, each named by its location."""

    detail: list[FieldError]


class Health(BaseModel):
    """``/health``: ``alive`` (200), ``starting`` (200: the engine loads) or ``dead`` (503, with why)."""

    status: Literal["alive", "starting", "dead"]
    detail: str | None = None


class Ready(BaseModel):
    """``/ready`` when the engine answers: what it serves, and the options each gate takes per request."""

    status: Literal["ready"]
    gates: list[str]
    model: str
    backend: str
    max_model_len: int
    options: dict[str, list[str]]


class NotReady(BaseModel):
    """``/ready`` answered 503: ``starting`` (with ``Retry-After``), ``busy`` (the engine check did not answer)
    or ``dead``."""

    status: Literal["starting", "busy", "dead"]
    detail: str


def error_responses(descriptions: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of refusals: each status with its description and the schema of its body."""
    return {
        status: {"description": text, "model": ValidationErrors if status == 422 else Error}
        for status, text in descriptions.items()
    }
