"""The gateway's JSON responses: compact, and able to carry any text a payload holds."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from shuttle.utf8 import json_text


class Utf8JSONResponse(JSONResponse):
    """Starlette's JSONResponse writes non-ASCII text as UTF-8, which fails on a lone
    surrogate (a payload may carry one escaped, as JSON allows); this one escapes it."""

    def render(self, content: Any) -> bytes:
        return json_text(content).encode()
