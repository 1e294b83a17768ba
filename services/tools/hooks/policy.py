"""Small configurable policies: deny tools, fix arguments, redact observations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from services.tools.hooks.base import (
    CallRecord,
    Hook,
    HookContext,
    PostResult,
    PreResult,
    block,
    rewrite,
)


@dataclass(kw_only=True)
class DenyHook(Hook):
    """Blocks every matching call with a fixed reason."""

    name: str = "deny"
    fail_closed: bool = True
    priority: int = 20
    reason: str = "this tool is disabled by your administrator"

    async def pre(self, ctx: HookContext) -> PreResult:
        return block(self.reason)


@dataclass(kw_only=True)
class SetArgumentsHook(Hook):
    """Rewrites arguments: `values` override whatever the model sent for those fields."""

    name: str = "set_arguments"
    fail_closed: bool = True
    priority: int = 40
    values: dict[str, Any] = field(default_factory=dict)

    async def pre(self, ctx: HookContext) -> PreResult:
        return rewrite({**ctx.arguments, **self.values})


@dataclass(kw_only=True)
class RedactHook(Hook):
    """Replaces every match of `pattern` in the observation (secrets, personal data)."""

    name: str = "redact"
    # A redaction that did not happen must not leak what it was meant to hide.
    fail_closed: bool = True
    priority: int = 800
    pattern: str = ""
    replacement: str = "[redacted]"
    _compiled: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.pattern:
            raise ValueError(f"hook {self.name!r}: pattern is required")
        try:
            self._compiled = re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"hook {self.name!r}: invalid pattern: {exc}") from None

    async def post(self, ctx: HookContext, record: CallRecord) -> PostResult | None:
        text, count = self._compiled.subn(self.replacement, record.observation)
        return PostResult(observation=text) if count else None
