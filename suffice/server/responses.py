"""The service's JSON answers: the response class every route uses and the shapes of its refusals."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from fastapi.responses import JSONResponse as _Utf8JSONResponse

Location = list[str | int]


class JSONResponse(_Utf8JSONResponse):
    """JSON whose strings UTF-8 cannot hold (lone surrogates) written as escapes, where Starlette's raises."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def unprocessable(location: Location, message: str) -> JSONResponse:
    """422 in FastAPI's own shape, so clients parse one error format."""
    return JSONResponse({"detail": [{"loc": location, "msg": message, "type": "value_error"}]}, status_code=422)


def refused(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """Any other refusal: ``{"detail": ...}``."""
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


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
