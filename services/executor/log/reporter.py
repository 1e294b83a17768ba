"""Turns engine signals into workflow events: which signal is which event type, with which
payload fields (each as the event catalogue names them)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from services.executor.log.emitter import EventEmitter
from services.executor.ports import Route
from shuttle.llm.protocol import ChatResult
from shuttle.tool_calls import DataProcessed, ToolOutcome
from shuttle.usage import TokenUsage
from shuttle.workflow_log import EventDraft


def clip(text: str, limit: int) -> tuple[str, bool]:
    """Cut on characters, not bytes, so the result is always valid UTF-8."""
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def summarize_args(arguments_json: str, limit: int = 80) -> str:
    """A one-line view of tool arguments for an event's `message`."""
    try:
        args = json.loads(arguments_json)
    except ValueError:
        return clip(arguments_json, limit)[0]
    if isinstance(args, dict) and len(args) == 1:
        (value,) = args.values()
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    else:
        text = json.dumps(args, ensure_ascii=False)
    return clip(text, limit)[0]


class RunReporter:
    """Queues one run's events on its emitter in the order the engine signals them."""

    def __init__(self, emitter: EventEmitter) -> None:
        self._emitter = emitter
        self.ended = False
        """Whether the run's terminal event has been emitted."""

    @property
    def last_seq(self) -> int:
        return self._emitter.last_seq

    async def emit(self, draft: EventDraft) -> None:
        await self._emitter.emit(draft)

    async def _emit(
        self, type_: str, message: str, payload: Mapping[str, Any], agent_id: str = ""
    ) -> None:
        await self._emitter.emit(EventDraft(type_, message, payload, agent_id))

    async def flush(self) -> None:
        await self._emitter.flush()

    def successor(self) -> RunReporter:
        """A reporter for the run's last words after the log refused one of its batches."""
        return RunReporter(self._emitter.successor())

    async def answer_delta(self, agent_id: str, delta: str, index: int) -> None:
        await self._emit(
            "THREAD_MESSAGE_DELTA", "Content chunk", {"delta": delta, "index": index}, agent_id
        )

    # -- lifecycle --------------------------------------------------------------------------

    async def workflow_started(
        self,
        query: str,
        route: Route,
        session_id: str,
        executor: str = "",
    ) -> None:
        """`executor`: the replica that runs it (whoever takes the run over names it);
        `routing` what deciding the mode spent, which the run's usage includes."""
        payload = {
            "query": query,
            "mode": route.mode,
            "session_id": session_id,
            "estimated_complexity": route.estimated_complexity,
            "executor": executor,
            "routing": {"usage": route.usage.as_payload(), "cost_usd": route.usage.cost_usd},
        }
        await self._emit("WORKFLOW_STARTED", "Workflow started", payload)

    async def recovered(self, message: str, payload: Mapping[str, Any]) -> None:
        """ERROR_RECOVERY: the run goes on after a failure (`payload` names it)."""
        await self._emit("ERROR_RECOVERY", message, payload)

    async def workflow_completed(
        self,
        result: str,
        duration_ms: int,
        usage: TokenUsage,
        agents_used: int,
        tools_invoked: int,
    ) -> None:
        payload = {
            "result": result,
            "duration_ms": duration_ms,
            "total_tokens": usage.total_tokens,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_cost_usd": round(usage.cost_usd, 6),
            "agents_used": agents_used,
            "tools_invoked": tools_invoked,
        }
        self.ended = True
        await self._emit("WORKFLOW_COMPLETED", "Workflow completed successfully", payload)

    async def error(
        self,
        error_type: str,
        error_message: str,
        *,
        fatal: bool,
        agent_id: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        payload = {
            "error_type": error_type,
            "error_message": error_message,
            "recoverable": not fatal,
            "fatal": fatal,
            **(extra or {}),
        }
        self.ended = self.ended or fatal
        await self._emit("ERROR_OCCURRED", error_message[:200], payload, agent_id)

    async def stream_end(self) -> None:
        await self._emit("STREAM_END", "Stream ended", {})

    # -- agent ------------------------------------------------------------------------------

    async def agent_started(
        self,
        agent_id: str,
        role: str,
        subtask: str,
        tools: Sequence[str],
        *,
        prompt: str = "",
        tool_mode: str = "",
    ) -> None:
        """`prompt`: what the agent is asked, when it is more than `subtask` (a DAG step's
        prompt); `tool_mode`: native or json (a run taken over rebuilds the agent's state
        from these)."""
        payload: dict[str, Any] = {
            "role": role,
            "subtask": subtask,
            "tools_available": list(tools),
            "tool_mode": tool_mode,
        }
        if prompt:
            payload["prompt"] = prompt
        await self._emit("AGENT_STARTED", "Agent started", payload, agent_id)

    async def agent_completed(
        self, agent_id: str, result: str, usage: TokenUsage, duration_ms: int, iterations: int
    ) -> None:
        payload = {
            "result": result,
            "tokens_used": usage.total_tokens,
            "cost_usd": round(usage.cost_usd, 6),
            "duration_ms": duration_ms,
            "iterations": iterations,
        }
        await self._emit("AGENT_COMPLETED", "Agent completed successfully", payload, agent_id)

    async def thinking(
        self,
        agent_id: str,
        iteration: int,
        status: str,
        reasoning: str = "",
        next_action: str = "",
        confidence: float | None = None,
    ) -> None:
        payload: dict[str, Any] = {"status": status, "iteration": iteration}
        if status == "done":
            payload |= {"thought": reasoning, "reasoning": reasoning, "next_action": next_action}
        if confidence is not None:
            payload["confidence"] = confidence
        message = "Thinking…" if status == "start" else (reasoning[:120] or "Decided next step")
        await self._emit("AGENT_THINKING", message, payload, agent_id)

    async def llm_prompt(self, agent_id: str, payload: Mapping[str, Any]) -> None:
        """Before a model call (log/prompts.py builds the payload); ephemeral by default."""
        await self._emit("LLM_PROMPT", "Sending prompt to LLM", payload, agent_id)

    async def llm_partial(self, agent_id: str, payload: Mapping[str, Any]) -> None:
        """Streamed output that is not the answer (log/partials.py); ephemeral."""
        await self._emit("LLM_PARTIAL", "Received partial LLM output", payload, agent_id)

    async def llm_output(self, agent_id: str, result: ChatResult, phase: str) -> None:
        # Exact cost and the calls' arguments: a run taken over rebuilds its conversation
        # and its spending from these.
        payload = {
            "output": result.content,
            "model": result.model,
            "provider": result.provider,
            "usage": result.usage.as_payload(),
            "cost_usd": result.usage.cost_usd,
            "duration_ms": result.duration_ms,
            "finish_reason": result.finish_reason,
            "phase": phase,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in result.tool_calls
            ],
        }
        await self._emit("LLM_OUTPUT", "LLM output complete", payload, agent_id)

    async def tool_invoked(
        self,
        agent_id: str,
        iteration: int,
        call_id: str,
        tool_name: str,
        arguments_json: str,
        timeout_seconds: float,
    ) -> None:
        try:
            tool_args: Any = json.loads(arguments_json)
        except ValueError:
            tool_args = arguments_json
        payload = {
            "tool_name": tool_name,
            "tool_args": tool_args,
            "call_id": call_id,
            "iteration": iteration,
            "timeout_seconds": timeout_seconds,
        }
        message = f"{tool_name}: {summarize_args(arguments_json)}"
        await self._emit("TOOL_INVOKED", message, payload, agent_id)

    async def data_processing(
        self, agent_id: str, tool_name: str, call_id: str, processed: DataProcessed
    ) -> None:
        """How much data a tool worked through, between its call and its observation."""
        amount = (
            f"{processed.records_processed:,} records"
            if processed.records_processed is not None
            else f"{processed.bytes_processed:,} bytes"
        )
        payload = {
            "operation": processed.operation,
            "records_processed": processed.records_processed,
            "total_records": processed.total_records,
            "bytes_processed": processed.bytes_processed,
            "processing_stage": processed.processing_stage,
            "tool_name": tool_name,
            "call_id": call_id,
        }
        await self._emit("DATA_PROCESSING", f"{tool_name}: processed {amount}", payload, agent_id)

    async def tool_observation(
        self, agent_id: str, iteration: int, call_id: str, tool_name: str, outcome: ToolOutcome
    ) -> None:
        # The whole observation goes to the log, which cuts the streamed copy at
        # 2,000 characters and keeps the full text for history (List full_results).
        payload: dict[str, Any] = {
            "tool_name": tool_name,
            "result": outcome.observation,
            "duration_ms": outcome.duration_ms,
            "truncated": outcome.truncated,
            "call_id": call_id,
            "iteration": iteration,
            "error": outcome.error,
            "blocked": outcome.blocked,
        }
        # The rest of the outcome only when there is any (the log sets `truncated` itself
        # for a result it cuts, so whether the tool cut it is said apart).
        if outcome.block_reason:
            payload["block_reason"] = outcome.block_reason
        if outcome.truncated:
            payload["tool_truncated"] = True
        if outcome.artifacts:
            payload["artifacts"] = [
                {"name": a.name, "mime_type": a.mime_type, "size_bytes": a.size_bytes, "uri": a.uri}
                for a in outcome.artifacts
            ]
        first_line = outcome.observation.strip().splitlines()[0] if outcome.observation else ""
        message = f"{tool_name}: {clip(first_line, 80)[0]}"
        await self._emit("TOOL_OBSERVATION", message, payload, agent_id)

    async def answer_completed(self, agent_id: str, content: str, total_tokens: int) -> None:
        payload = {"content": content, "total_tokens": total_tokens}
        await self._emit("THREAD_MESSAGE_COMPLETED", "Message complete", payload, agent_id)

    # -- guards, context, budget -------------------------------------------------------------

    async def status_update(self, agent_id: str, message: str, payload: Mapping[str, Any]) -> None:
        """A phase (`payload.phase`) or an injected guard message (`payload.kind`); the
        catalogue's `status` names which, `details` says it in words."""
        status = payload.get("phase") or payload.get("kind") or ""
        await self._emit(
            "STATUS_UPDATE", message, {"status": status, "details": message, **payload}, agent_id
        )

    async def compacted(
        self,
        agent_id: str,
        method: str,
        original_messages: int,
        kept_messages: int,
        tokens_before: int,
        tokens_after: int,
        entries: Sequence[int | Mapping[str, Any]],
    ) -> None:
        """`entries`: the compacted conversation against the one before (indexes of the
        messages kept, new messages whole), from which a run taken over rebuilds it."""
        payload = {
            "key": "conversation",
            "value": {"messages": kept_messages, "tokens": tokens_after},
            "action": "COMPACT",
            "kind": "compact",
            "method": method,
            "original_messages": original_messages,
            "kept_messages": kept_messages,
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "entries": list(entries),
        }
        message = f"Context compacted: {original_messages} → {kept_messages} messages"
        await self._emit("WORKSPACE_UPDATED", message, payload, agent_id)

    async def budget_threshold(
        self, agent_id: str, used: int, budget: int, threshold_percent: float
    ) -> None:
        usage_percent = round(100.0 * used / budget, 1)
        payload = {
            "usage_percent": usage_percent,
            "threshold_percent": threshold_percent,
            "tokens_used": used,
            "tokens_budget": budget,
            "level": "warning",
            "budget_type": "task",
        }
        message = f"Task budget at {usage_percent}% (threshold: {threshold_percent}%)"
        await self._emit("BUDGET_THRESHOLD", message, payload, agent_id)

    # -- control -----------------------------------------------------------------------------

    async def workflow_paused(self, checkpoint: str) -> None:
        payload = {"checkpoint": checkpoint}
        await self._emit("WORKFLOW_PAUSED", f"Workflow paused at {checkpoint}", payload)

    async def workflow_resumed(self, reason: str) -> None:
        await self._emit("WORKFLOW_RESUMED", "Workflow resumed", {"reason": reason})

    async def workflow_cancelled(
        self, checkpoint: str, reason: str, duration_ms: int, usage: TokenUsage
    ) -> None:
        payload = {
            "checkpoint": checkpoint,
            "reason": reason,
            "duration_ms": duration_ms,
            "total_tokens": usage.total_tokens,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_cost_usd": round(usage.cost_usd, 6),
        }
        self.ended = True
        await self._emit("WORKFLOW_CANCELLED", f"Workflow cancelled at {checkpoint}", payload)
