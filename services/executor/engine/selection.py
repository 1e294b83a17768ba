"""Tool selection: with many tools, offer the model only those the planner picks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.executor.ports import Selection, ToolDefinition, ToolSelector
from shuttle.usage import TokenUsage

log = logging.getLogger(__name__)


async def select_tools(
    selector: ToolSelector | None,
    workflow_id: str,
    query: str,
    tools: Sequence[ToolDefinition],
    max_tools: int,
) -> tuple[list[ToolDefinition], bool, TokenUsage]:
    """(the tools to offer, whether selection fell back to the full set, what it spent).

    Any failure (no selector, an error, no valid name) keeps the full set: a poor selection
    must never cost the agent a tool, only context.
    """
    selection = Selection(None)
    if selector is not None:
        try:
            selection = await selector.select(workflow_id, query, tools, max_tools)
        except Exception:
            log.exception("tool selection failed", extra={"workflow_id": workflow_id})
    # The planner's choice stands as it is: it may offer them all when few enough.
    chosen = set(selection.names or ())
    selected = [t for t in tools if t.name in chosen]
    if not selected:
        return list(tools), True, selection.usage
    return selected, False, selection.usage
