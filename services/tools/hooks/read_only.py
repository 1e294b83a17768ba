"""Read-only guard: only `read_only` tools run for a read-only workflow or tenant."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from services.tools.hooks.base import ALLOW, Hook, HookContext, PreResult, block


@dataclass(kw_only=True)
class ReadOnlyGuard(Hook):
    name: str = "read_only"
    fail_closed: bool = True
    priority: int = 10
    read_only_tenants: Collection[str] = field(default_factory=frozenset)

    async def pre(self, ctx: HookContext) -> PreResult:
        if ctx.tool.read_only:
            return ALLOW
        if ctx.read_only:
            scope = "this workflow is"
        elif ctx.tenant_id in self.read_only_tenants:
            scope = "your organisation is"
        else:
            return ALLOW
        return block(
            f"{scope} in read-only mode, and {ctx.tool.name} can change things; "
            "use only read-only tools"
        )
