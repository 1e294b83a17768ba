"""Usage figures as the OpenAI schemas type them."""

from __future__ import annotations

import math
from typing import Any


def token_count(value: Any) -> int:
    """A usage figure as the OpenAI schema types it; 0 for what no producer should send
    (any producer may append events, so the payload is not trusted to be well typed)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0) if math.isfinite(value) else 0
