"""What the OpenAI faces refuse by name rather than silently ignore."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import ApiError

OWN_TOOLS = (
    "Shuttle runs its own tools (its tools service, with hooks and approvals); send no "
    "client-side tools"
)
SAMPLING = "sampling is set per model in Shuttle's models file"
# Values that ask for nothing, and so are taken as absent.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "tool_choice": ("auto", "none"),
    "function_call": ("auto", "none"),
    "n": (1,),
    "parallel_tool_calls": (True, False),
}


def refuse_unsupported(given: Mapping[str, Any], refused: Mapping[str, str]) -> None:
    """400 naming the first parameter in `given` that `refused` lists, with its reason."""
    for name, why in refused.items():
        value = given.get(name)
        if value in (None, [], {}) or value in _NEUTRAL.get(name, ()):
            continue
        raise ApiError(400, "unsupported_parameter", f"{name}: {why}")
