"""Built-in tools shipped with the tool host."""

from __future__ import annotations

from services.tools.builtins.calculator import Calculator
from services.tools.catalog import Tool


def default_tools() -> list[Tool]:
    """Fresh instances of every built-in tool, in catalog order."""
    return [Calculator()]
