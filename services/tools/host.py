"""ToolHost: runs one tool call end to end and turns every failure into a result.

A tool call never raises out of `execute`: unknown tools, bad arguments, tool errors,
crashes and timeouts all come back as a `ToolOutcome` whose observation tells the
model what went wrong, so a broken tool can never kill a run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from services.tools.artifacts import ArtifactStore, is_artifact
from services.tools.catalog import Tool, ToolError, ToolOutput, ToolRegistry, ToolSpec
from services.tools.context import CallInfo, reset_current_call, set_current_call
from services.tools.hooks.approval import ApprovalGate
from services.tools.hooks.base import CallRecord, HookContext
from services.tools.hooks.chain import HookChain
from services.tools.output import DEFAULT_MAX_OUTPUT_CHARS, truncate
from shuttle.tool_calls import ToolCall, ToolOutcome

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 30.0
# Schema messages quote the offending value, which can be arbitrarily large.
_MAX_DETAIL_CHARS = 300


@dataclass(frozen=True)
class _Failure:
    message: str


@dataclass(frozen=True)
class _Blocked:
    hook: str
    reason: str


def _clip(text: str, limit: int = _MAX_DETAIL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def describe_parameters(schema: dict[str, Any]) -> str:
    """A one-line summary of an object schema, e.g. "expression (string, required)"."""
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = []
    for key, prop in properties.items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        kind = "/".join(kind) if isinstance(kind, list) else str(kind)
        parts.append(f"{key} ({kind}{', required' if key in required else ''})")
    summary = ", ".join(parts) if parts else "no arguments"
    if schema.get("additionalProperties") is False:
        summary += "; no other fields"
    return summary


def _expected(spec: ToolSpec) -> str:
    return f"send a JSON object with: {describe_parameters(spec.parameters)}"


class ToolHost:
    """Looks tools up, validates arguments, runs the tool with a timeout, shapes the output."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        default_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        hooks: HookChain | None = None,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        if not default_timeout_seconds > 0:
            raise ValueError("default_timeout_seconds must be > 0")
        if max_output_chars < 1:
            raise ValueError("max_output_chars must be >= 1")
        self._registry = registry
        self._default_timeout = default_timeout_seconds
        self._max_output_chars = max_output_chars
        self._validators: dict[str, Validator] = {}
        self._hooks = hooks or HookChain()
        self._artifacts = artifacts

    @property
    def registry(self) -> ToolRegistry:
        return self._registry

    def list_tools(
        self,
        *,
        tenant_id: str = "",
        category: str = "",
        names: Collection[str] = (),
        read_only_only: bool = False,
    ) -> list[ToolSpec]:
        """The catalog, filtered; `requires_approval` is set where the tenant's gates apply."""
        specs = self._registry.list(category=category, names=names, read_only_only=read_only_only)
        return [
            replace(spec, requires_approval=True)
            if self.requires_approval(spec, tenant_id)
            else spec
            for spec in specs
        ]

    def requires_approval(self, spec: ToolSpec, tenant_id: str) -> bool:
        return any(
            isinstance(hook, ApprovalGate) and hook.gates(spec, tenant_id)
            for hook in self._hooks.hooks
        )

    def timeout_for(self, spec: ToolSpec) -> float:
        """The timeout a call to this tool gets: its own, else the host default."""
        return spec.timeout_seconds or self._default_timeout

    def longest_run(self, tool_name: str, tenant_id: str) -> float:
        """Seconds a call may take on a live replica: the tool's timeout plus the wait of
        every approval gate in its way (hooks and the outcome's write aside)."""
        tool = self._registry.get(tool_name)
        if tool is None:
            return self._default_timeout
        approvals = sum(
            hook.timeout_seconds
            for hook in self._hooks.hooks
            if isinstance(hook, ApprovalGate) and hook.gates(tool.spec, tenant_id)
        )
        return self.timeout_for(tool.spec) + approvals

    @property
    def artifacts(self) -> ArtifactStore | None:
        """Where tools' artifacts are kept, when they are."""
        return self._artifacts

    async def execute(self, call: ToolCall) -> ToolOutcome:
        """Run one tool call through its hooks; never raises for anything a tool does."""
        started = time.perf_counter()
        tool = self._registry.get(call.tool_name)
        if tool is None:
            return self._finish(call, self._unknown_tool(call.tool_name), started)
        args = self._parse_arguments(tool.spec, call.arguments_json)
        if isinstance(args, _Failure):
            return self._finish(call, args, started)
        problem = self._validate(tool.spec, args)
        if problem is not None:
            return self._finish(call, problem, started)
        ctx = HookContext(
            tool=tool.spec,
            arguments=args,
            call_id=call.call_id,
            workflow_id=call.workflow_id,
            tenant_id=call.tenant_id,
            agent_id=call.agent_id,
            read_only=call.read_only,
        )
        pre = await self._hooks.run_pre(ctx)
        outcome: ToolOutput | _Failure | _Blocked
        if not pre.allowed:
            outcome = _Blocked(pre.blocked_by, pre.reason)
        else:
            ctx = ctx.with_arguments(pre.arguments)
            rewritten_problem = self._validate(tool.spec, pre.arguments) if pre.rewritten else None
            if rewritten_problem is not None:
                outcome = _Failure(
                    f"a policy rewrote the arguments badly: {rewritten_problem.message}"
                )
            else:
                outcome = await self._run_tool(tool, pre.arguments, call)
        record = await self._hooks.run_post(ctx, self._record(outcome, started))
        return self._result(call, record)

    def _record(self, outcome: ToolOutput | _Failure | _Blocked, started: float) -> CallRecord:
        duration_ms = int((time.perf_counter() - started) * 1000)
        if isinstance(outcome, _Blocked):
            return CallRecord(
                observation=f"Blocked: {outcome.reason}",
                blocked=True,
                blocked_by=outcome.hook,
                block_reason=outcome.reason,
                duration_ms=duration_ms,
            )
        if isinstance(outcome, _Failure):
            text = f"Error: {outcome.message}"
            return CallRecord(
                observation=text, full_output=text, error=outcome.message, duration_ms=duration_ms
            )
        return CallRecord(
            observation=outcome.text,
            full_output=outcome.text,
            artifacts=outcome.artifacts,
            duration_ms=duration_ms,
            processed=outcome.processed,
        )

    def _finish(self, call: ToolCall, failure: _Failure, started: float) -> ToolOutcome:
        """A call that never reached its hooks (unknown tool, malformed arguments)."""
        return self._result(call, self._record(failure, started))

    def _result(self, call: ToolCall, record: CallRecord) -> ToolOutcome:
        # The hooks have shaped the observation; this cap only bounds what goes on the wire.
        observation, cut = truncate(record.observation, self._max_output_chars)
        error = truncate(record.error, self._max_output_chars)[0] if record.error else ""
        log.debug(
            "tool call finished",
            extra={
                "tool_name": call.tool_name,
                "call_id": call.call_id,
                "workflow_id": call.workflow_id,
                "outcome": record.outcome,
                "duration_ms": record.duration_ms,
            },
        )
        return ToolOutcome(
            call_id=call.call_id,
            observation=observation,
            error=error,
            blocked=record.blocked,
            block_reason=record.block_reason,
            truncated=record.truncated or cut,
            artifacts=record.artifacts,
            duration_ms=record.duration_ms,
            processed=record.processed,
        )

    async def _run_tool(
        self, tool: Tool, args: dict[str, Any], call: ToolCall
    ) -> ToolOutput | _Failure:
        """The one place a tool runs, between the PreToolUse and PostToolUse hooks."""
        name = tool.spec.name
        timeout = self.timeout_for(tool.spec)
        deadline = asyncio.timeout(timeout)
        info = CallInfo(
            tool_name=name,
            call_id=call.call_id,
            workflow_id=call.workflow_id,
            tenant_id=call.tenant_id,
            agent_id=call.agent_id,
        )
        token = set_current_call(info)
        try:
            async with deadline:
                output = await tool.run(args)
        except ToolError as exc:
            return _Failure(str(exc) or f"tool {name!r} failed")
        except TimeoutError as exc:
            # A TimeoutError from inside the tool (its own I/O) is a crash, not our deadline.
            if not deadline.expired():
                return self._crashed(name, exc, call)
            log.warning(
                "tool timed out",
                extra={"tool_name": name, "call_id": call.call_id, "timeout_seconds": timeout},
            )
            return _Failure(
                f"tool {name!r} timed out after {timeout:g} seconds; "
                "try a smaller request or a different approach"
            )
        except Exception as exc:
            return self._crashed(name, exc, call)
        finally:
            reset_current_call(token)
        # Tools may be plugins that ignore the type hints; a wrong return must not escape.
        if not isinstance(output, ToolOutput) or not isinstance(output.text, str):
            return _Failure(f"tool {name!r} returned {type(output).__name__}, not ToolOutput text")
        if self._artifacts is not None and is_artifact(output):
            try:
                return self._artifacts.save(info, output)
            except (OSError, ToolError) as exc:
                log.error("could not store an artifact", exc_info=exc, extra={"tool_name": name})
        return output

    def _crashed(self, name: str, exc: BaseException, call: ToolCall) -> _Failure:
        log.error(
            "tool raised an exception",
            exc_info=exc,
            extra={"tool_name": name, "call_id": call.call_id, "workflow_id": call.workflow_id},
        )
        return _Failure(f"tool {name} failed: {type(exc).__name__}: {_clip(str(exc))}")

    def _unknown_tool(self, name: str) -> _Failure:
        available = self._registry.names()
        listing = ", ".join(available) if available else "(none)"
        return _Failure(f"unknown tool {_clip(name, 100)!r}; available tools: {listing}")

    def _parse_arguments(self, spec: ToolSpec, text: str) -> dict[str, Any] | _Failure:
        if not text.strip():
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            return _Failure(
                f"arguments for {spec.name!r} are not valid JSON ({exc.msg} at line "
                f"{exc.lineno} column {exc.colno}); {_expected(spec)}"
            )
        except (ValueError, RecursionError):
            return _Failure(f"arguments for {spec.name!r} are not valid JSON; {_expected(spec)}")
        if not isinstance(value, dict):
            kind = "an array" if isinstance(value, list) else type(value).__name__
            return _Failure(
                f"arguments for {spec.name!r} must be a JSON object, got {kind}; {_expected(spec)}"
            )
        return value

    def _validate(self, spec: ToolSpec, args: dict[str, Any]) -> _Failure | None:
        validator = self._validators.get(spec.name)
        if validator is None:
            validator = validator_for(spec.parameters)(spec.parameters)
            self._validators[spec.name] = validator
        error = best_match(validator.iter_errors(args))
        if error is None:
            return None
        path = "/".join(str(part) for part in error.absolute_path)
        where = f"field '{path}': " if path else ""
        return _Failure(
            f"invalid arguments for {spec.name!r}: {where}{_clip(error.message)}; "
            f"expected {describe_parameters(spec.parameters)}"
        )
