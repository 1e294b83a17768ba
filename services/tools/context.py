"""Who a tool call is for, available to tools that need it (workspaces, artifacts)."""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass

# Ids become directory names; anything else is replaced so an id can never climb out.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, kw_only=True)
class CallInfo:
    tool_name: str
    call_id: str = ""
    workflow_id: str = ""
    tenant_id: str = ""
    agent_id: str = ""

    @property
    def idempotency_key(self) -> str:
        """ "<workflow_id>/<call_id>", the same for every attempt at one call of a run, for
        providers to apply a call once; empty outside a workflow."""
        if not (self.workflow_id and self.call_id):
            return ""
        return f"{self.workflow_id}/{self.call_id}"


_current: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar(
    "shuttle_tool_call", default=None
)


def current_call() -> CallInfo:
    """The call being run; tools run only inside ToolHost, which always sets it."""
    info = _current.get()
    return info if info is not None else CallInfo(tool_name="")


def set_current_call(info: CallInfo) -> contextvars.Token[CallInfo | None]:
    return _current.set(info)


def reset_current_call(token: contextvars.Token[CallInfo | None]) -> None:
    _current.reset(token)


def safe_segment(value: str, fallback: str) -> str:
    """A string usable as one path segment: never empty, '.', '..' or containing '/'."""
    cleaned = _UNSAFE.sub("_", value)[:128]
    return cleaned if cleaned.strip(".") else fallback
