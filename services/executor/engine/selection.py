"""Tool selection: with many tools, offer the model only those the planner picks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.executor.ports import ToolDefinition, ToolSelector

log = logging.getLogger(__name__)


async def select_tools(
    selector: ToolSelector | None,
    workflow_id: str,
    query: str,
    tools: Sequence[ToolDefinition],
    max_tools: int,
) -> tuple[list[ToolDefinition], bool]:
    """(the tools to offer, whether selection fell back to the full set).

    Any failure (no selector, an error, no valid name) keeps the full set: a poor selection
    must never cost the agent a tool, only context.
    """
    names: Sequence[str] | None = None
    if selector is not None:
        try:
            names = await selector.select(workflow_id, query, tools, max_tools)
        except Exception:
            log.exception("tool selection failed", extra={"workflow_id": workflow_id})
    # The planner's choice stands as it is: it may offer them all when few enough.
    chosen = set(names or ())
    selected = [t for t in tools if t.name in chosen]
    if not selected:
        return list(tools), True
    return selected, False
