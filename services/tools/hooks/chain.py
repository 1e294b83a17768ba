"""HookChain: runs the hooks that apply to a call, in priority order, with their failure modes."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from services.tools.hooks.base import CallRecord, Hook, HookContext
from shuttle.metrics import HOOK_BLOCKS

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PreOutcome:
    allowed: bool
    arguments: dict[str, Any]
    rewritten: bool = False
    blocked_by: str = ""
    reason: str = ""


class HookChain:
    """An ordered set of hooks; `hooks_for` picks those matching a tool and tenant."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        indexed = list(enumerate(hooks))
        # sorted() is stable, so equal priorities keep configuration order.
        self._hooks = [hook for _, hook in sorted(indexed, key=lambda item: item[1].priority)]

    @property
    def hooks(self) -> Sequence[Hook]:
        return tuple(self._hooks)

    def hooks_for(self, tool_name: str, tenant_id: str) -> list[Hook]:
        return [hook for hook in self._hooks if hook.applies_to(tool_name, tenant_id)]

    async def drain(self) -> None:
        """Wait for the hooks' background work (queued audit rows) to finish."""
        for hook in self._hooks:
            await hook.drain()

    async def run_pre(self, ctx: HookContext) -> PreOutcome:
        """PreToolUse: the first block wins; rewrites feed the hooks after them."""
        arguments, rewritten = ctx.arguments, False
        for hook in self.hooks_for(ctx.tool.name, ctx.tenant_id):
            try:
                verdict = await hook.pre(ctx.with_arguments(arguments))
            except Exception as exc:
                if not hook.fail_closed:
                    log.warning(
                        "advisory hook failed; continuing",
                        exc_info=exc,
                        extra={"hook": hook.name, "tool_name": ctx.tool.name},
                    )
                    continue
                log.error(
                    "security hook failed; blocking the call",
                    exc_info=exc,
                    extra={"hook": hook.name, "tool_name": ctx.tool.name},
                )
                HOOK_BLOCKS.labels(hook.name).inc()
                return PreOutcome(
                    allowed=False,
                    arguments=arguments,
                    blocked_by=hook.name,
                    reason=f"the policy check '{hook.name}' failed, so the call was not run; "
                    "do not retry it, tell the user it could not be checked",
                )
            if not verdict.allow:
                HOOK_BLOCKS.labels(hook.name).inc()
                return PreOutcome(
                    allowed=False,
                    arguments=arguments,
                    blocked_by=hook.name,
                    reason=verdict.reason or f"blocked by policy '{hook.name}'",
                )
            if verdict.arguments is not None:
                arguments, rewritten = verdict.arguments, True
        return PreOutcome(allowed=True, arguments=arguments, rewritten=rewritten)

    async def run_post(self, ctx: HookContext, record: CallRecord) -> CallRecord:
        """PostToolUse: each hook may rewrite the observation the next one sees."""
        for hook in self.hooks_for(ctx.tool.name, ctx.tenant_id):
            if record.blocked and not hook.observe_blocked:
                continue
            try:
                change = await hook.post(ctx, record)
            except Exception as exc:
                if not hook.fail_closed:
                    log.warning(
                        "advisory hook failed; continuing",
                        exc_info=exc,
                        extra={"hook": hook.name, "tool_name": ctx.tool.name},
                    )
                    continue
                log.error(
                    "security hook failed; withholding the result",
                    exc_info=exc,
                    extra={"hook": hook.name, "tool_name": ctx.tool.name},
                )
                message = (
                    f"the result of {ctx.tool.name} was withheld because the policy check "
                    f"'{hook.name}' failed"
                )
                record = replace(record, observation=f"Error: {message}", error=message)
                continue
            if change is None:
                continue
            if change.observation is not None:
                record = replace(record, observation=change.observation)
            if change.truncated is not None:
                record = replace(record, truncated=record.truncated or change.truncated)
        return record
