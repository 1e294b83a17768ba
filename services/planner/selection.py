"""Tool selection: with many tools, a cheap call picks the few the query needs.

Never fails: an unusable answer, no valid name, or any error gives the full tool set back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from services.planner.structured import structured_llm_call
from shuttle.llm.protocol import LLM
from shuttle.usage import TokenUsage

log = logging.getLogger(__name__)

TOOL_SELECTION_THRESHOLD = 12
"""Selection runs only when there are more tools than this."""
TOOL_SELECTION_MAX = 6
CATALOG_LINE_CHARS = 80

SELECTION_SCHEMA = {
    "type": "object",
    "properties": {"tools": {"type": "array", "items": {"type": "string"}}},
    "required": ["tools"],
}


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str = ""


@dataclass(frozen=True)
class Selection:
    names: list[str]
    fell_back: bool
    """True when selection failed and the full set is returned."""
    usage: TokenUsage
    reason: str = ""


def catalog_line(tool: ToolInfo, limit: int = CATALOG_LINE_CHARS) -> str:
    """`- name: first line of the description`, cut to about `limit` characters."""
    first_line = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
    line = f"- {tool.name}: {first_line}" if first_line else f"- {tool.name}"
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def compact_catalog(tools: Sequence[ToolInfo]) -> str:
    return "\n".join(catalog_line(t) for t in tools)


async def select_tools(
    llm: LLM,
    query: str,
    tools: Sequence[ToolInfo],
    *,
    pinned: Sequence[str] = (),
    max_tools: int = TOOL_SELECTION_MAX,
    threshold: int = TOOL_SELECTION_THRESHOLD,
) -> Selection:
    all_names = [t.name for t in tools]
    if len(tools) <= threshold:
        return Selection(all_names, False, TokenUsage(), "few enough tools to offer them all")
    limit = max_tools if max_tools > 0 else TOOL_SELECTION_MAX
    messages = [
        {
            "role": "system",
            "content": (
                f"Pick the tools (at most {limit}) that the task below needs, from this "
                f"catalog. Use the names exactly as written.\n\n{compact_catalog(tools)}"
            ),
        },
        {"role": "user", "content": query},
    ]
    usage = TokenUsage()
    try:
        result = await structured_llm_call(
            llm,
            messages,
            SELECTION_SCHEMA,
            schema_name="select_tools",
            description="The names of the tools the task needs.",
        )
    except Exception as exc:  # selection is an optimisation: any failure means "use them all"
        log.warning("tool selection failed, offering every tool: %s", exc)
        spent = getattr(exc, "usage", None)
        return Selection(
            all_names, True, spent if isinstance(spent, TokenUsage) else usage, str(exc)
        )
    usage = result.usage
    known = set(all_names)
    picked: list[str] = []
    for name in result.value["tools"]:
        if name in known and name not in picked:
            picked.append(name)
    picked = picked[:limit]
    if not picked:
        return Selection(all_names, True, usage, "the model named no known tool")
    keep = set(picked) | {name for name in pinned if name in known}
    return Selection([n for n in all_names if n in keep], False, usage)
