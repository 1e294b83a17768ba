"""The hooks file (YAML or JSON): deployment-wide and per-tenant hooks, typed and validated.

```yaml
read_only_tenants: [audit-team]
hooks:
  - kind: approval          # gate these tools too, not only those flagged requires_approval
    tools: ["http_request", "file_ops"]
    tenants: [acme]         # per tenant; omit for every tenant
  - kind: rate_limit
    capacity: 20
    refill_per_second: 0.5
```
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.tools.approval_flow import ApprovalService
from services.tools.buckets import TokenBuckets
from services.tools.hooks.approval import ApprovalGate
from services.tools.hooks.audit import AuditHook
from services.tools.hooks.base import Hook
from services.tools.hooks.chain import HookChain
from services.tools.hooks.policy import DenyHook, RedactHook, SetArgumentsHook
from services.tools.hooks.rate_limit import RateLimitHook
from services.tools.hooks.read_only import ReadOnlyGuard
from services.tools.hooks.truncation import TruncationHook
from shuttle.sql_transactions import WriteTransactions


class HooksConfigError(ValueError):
    """The hooks file is unreadable or invalid; the message names the file and the problem."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    tools: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    priority: int | None = None


class ApprovalEntry(_Entry):
    kind: Literal["approval"]
    risk_level: str = "HIGH"
    timeout_seconds: float | None = Field(None, gt=0)


class RateLimitEntry(_Entry):
    kind: Literal["rate_limit"]
    capacity: float = Field(10.0, ge=1)
    refill_per_second: float = Field(1.0, ge=0)


class DenyEntry(_Entry):
    kind: Literal["deny"]
    reason: str = "this tool is disabled by your administrator"


class SetArgumentsEntry(_Entry):
    kind: Literal["set_arguments"]
    values: dict[str, Any]


class RedactEntry(_Entry):
    kind: Literal["redact"]
    pattern: str
    replacement: str = "[redacted]"


class TruncateEntry(_Entry):
    kind: Literal["truncate"]
    max_chars: int = Field(ge=1)


class PythonEntry(_Entry):
    """A hook of your own: `factory` is "module:callable", called with `options`."""

    kind: Literal["python"]
    factory: str
    options: dict[str, Any] = Field(default_factory=dict)


HookEntry = Annotated[
    ApprovalEntry
    | RateLimitEntry
    | DenyEntry
    | SetArgumentsEntry
    | RedactEntry
    | TruncateEntry
    | PythonEntry,
    Field(discriminator="kind"),
]


class HooksConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    read_only_tenants: tuple[str, ...] = ()
    hooks: tuple[HookEntry, ...] = ()


def load_hooks_config(path: Path | None) -> HooksConfig:
    if path is None:
        return HooksConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise HooksConfigError(f"hooks file {path}: cannot read it: {exc}") from None
    try:
        return HooksConfig.model_validate(raw or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise HooksConfigError(f"hooks file {path}: {problems}") from None


def _common(entry: _Entry) -> dict[str, Any]:
    values: dict[str, Any] = {"tools": entry.tools, "tenants": entry.tenants}
    if entry.name:
        values["name"] = entry.name
    if entry.priority is not None:
        values["priority"] = entry.priority
    return values


def _python_hook(entry: PythonEntry) -> Hook:
    module_name, _, attribute = entry.factory.partition(":")
    try:
        factory: Callable[..., Any] = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise HooksConfigError(f"hook factory {entry.factory!r} not found: {exc}") from None
    hook = factory(**entry.options)
    if not isinstance(hook, Hook):
        raise HooksConfigError(f"hook factory {entry.factory!r} did not return a Hook")
    for key, value in _common(entry).items():
        setattr(hook, key, value)
    return hook


def build_chain(
    config: HooksConfig,
    *,
    audit_writes: WriteTransactions | None,
    approvals: ApprovalService | None,
    buckets: TokenBuckets,
    approval_timeout_seconds: float,
    max_observation_chars: int,
) -> HookChain:
    """The built-in hooks every deployment gets, then the configured ones."""
    hooks: list[Hook] = [
        ReadOnlyGuard(read_only_tenants=frozenset(config.read_only_tenants)),
        TruncationHook(max_chars=max_observation_chars),
    ]
    if approvals is not None:
        hooks.append(ApprovalGate(approvals=approvals, timeout_seconds=approval_timeout_seconds))
    if audit_writes is not None:
        hooks.append(AuditHook(writes=audit_writes))
    for entry in config.hooks:
        try:
            hooks.append(_entry_hook(entry, approvals, buckets, approval_timeout_seconds))
        except ValueError as exc:
            raise HooksConfigError(str(exc)) from None
    return HookChain(hooks)


def _entry_hook(
    entry: HookEntry,
    approvals: ApprovalService | None,
    buckets: TokenBuckets,
    approval_timeout_seconds: float,
) -> Hook:
    common = _common(entry)
    match entry:
        case ApprovalEntry():
            if approvals is None:
                raise HooksConfigError("an approval hook needs the approvals store")
            return ApprovalGate(
                approvals=approvals,
                flagged_only=False,
                risk_level=entry.risk_level,
                timeout_seconds=entry.timeout_seconds or approval_timeout_seconds,
                **common,
            )
        case RateLimitEntry():
            return RateLimitHook(
                capacity=entry.capacity,
                refill_per_second=entry.refill_per_second,
                buckets=buckets,
                **common,
            )
        case DenyEntry():
            return DenyHook(reason=entry.reason, **common)
        case SetArgumentsEntry():
            return SetArgumentsHook(values=entry.values, **common)
        case RedactEntry():
            return RedactHook(pattern=entry.pattern, replacement=entry.replacement, **common)
        case TruncateEntry():
            return TruncationHook(max_chars=entry.max_chars, **common)
        case PythonEntry():
            return _python_hook(entry)
    raise AssertionError(f"unhandled hook kind {entry!r}")
