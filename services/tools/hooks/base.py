"""What a hook is: its filters, its failure mode, and what it may return."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from typing import Any

from services.tools.catalog import ToolSpec
from shuttle.tool_calls import Artifact, DataProcessed


@dataclass(frozen=True, kw_only=True)
class HookContext:
    """One tool call as the hooks see it; `arguments` reflect earlier rewrites."""

    tool: ToolSpec
    arguments: dict[str, Any]
    call_id: str = ""
    workflow_id: str = ""
    tenant_id: str = ""
    agent_id: str = ""
    # The workflow runs in read-only mode (set by the caller for this call).
    read_only: bool = False

    def with_arguments(self, arguments: dict[str, Any]) -> HookContext:
        return replace(self, arguments=arguments)


@dataclass(frozen=True, kw_only=True)
class PreResult:
    """A PreToolUse verdict: allow (optionally with rewritten arguments) or block."""

    allow: bool = True
    reason: str = ""
    arguments: dict[str, Any] | None = None


ALLOW = PreResult()


def block(reason: str) -> PreResult:
    return PreResult(allow=False, reason=reason)


def rewrite(arguments: dict[str, Any]) -> PreResult:
    return PreResult(arguments=arguments)


@dataclass(frozen=True, kw_only=True)
class CallRecord:
    """A finished (or blocked) call as PostToolUse hooks see it.

    `observation` is what the model will see; `full_output` is the tool's whole text,
    kept for the record whatever hooks do to the observation.
    """

    observation: str
    full_output: str = ""
    error: str = ""
    blocked: bool = False
    blocked_by: str = ""
    block_reason: str = ""
    truncated: bool = False
    artifacts: tuple[Artifact, ...] = ()
    duration_ms: int = 0
    processed: DataProcessed | None = None

    @property
    def outcome(self) -> str:
        if self.blocked:
            return "blocked"
        return "error" if self.error else "ok"


@dataclass(frozen=True, kw_only=True)
class PostResult:
    """A PostToolUse rewrite of the observation; None fields leave it unchanged."""

    observation: str | None = None
    truncated: bool | None = None


@dataclass(kw_only=True)
class Hook:
    """Base of every hook. Override `pre` and/or `post`; the defaults do nothing.

    `fail_closed` must be chosen by each hook: True for security hooks (an exception blocks
    the call or withholds its result), False for advisory ones (the exception is logged and
    the call goes on as if the hook had not run).
    """

    name: str
    fail_closed: bool
    # Lower runs first; ties keep configuration order.
    priority: int = 100
    # Tool-name globs ("http_*"); empty means every tool.
    tools: tuple[str, ...] = ()
    # Tenants this hook applies to; empty means every tenant (a deployment-wide hook).
    tenants: tuple[str, ...] = ()
    # Whether `post` also sees calls an earlier hook blocked (the audit log does).
    observe_blocked: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def applies_to(self, tool_name: str, tenant_id: str) -> bool:
        if self.tenants and tenant_id not in self.tenants:
            return False
        return not self.tools or any(fnmatch.fnmatchcase(tool_name, g) for g in self.tools)

    async def pre(self, ctx: HookContext) -> PreResult:
        return ALLOW

    async def post(self, ctx: HookContext, record: CallRecord) -> PostResult | None:
        return None

    async def drain(self) -> None:
        """Wait for what `post` left to finish in the background (none by default)."""
