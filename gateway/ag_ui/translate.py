"""The workflow log as AG-UI events: one translator per stream, fed the log's envelopes in
seq order (`shuttle.envelope.to_json_dict`), each giving the AG-UI events it stands for.

- WORKFLOW_STARTED → RUN_STARTED and a STATE_SNAPSHOT (status, usage); every model call's
  LLM_OUTPUT → a STATE_SNAPSHOT with the usage so far.
- An agent's iteration (AGENT_THINKING start) → STEP_STARTED `iteration N` (a DAG step's
  agent: `<agent> iteration N`, inside a step named after the agent), finished when the next
  one starts, the answer begins or the agent completes.
- The reasoning a model gave before calling tools → REASONING_START … REASONING_END.
- TOOL_INVOKED → TOOL_CALL_START / ARGS / END; TOOL_OBSERVATION → TOOL_CALL_RESULT.
- THREAD_MESSAGE_DELTA / COMPLETED → TEXT_MESSAGE_START / CONTENT / END (the answer).
- WORKFLOW_COMPLETED / CANCELLED → RUN_FINISHED (success / cancelled); a fatal
  ERROR_OCCURRED → RUN_ERROR. Everything still open is closed first.
- The rest (approvals, budget, control, recoveries, …) → CUSTOM `shuttle.<TYPE>`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import RunFinishedCancelledOutcome, RunFinishedSuccessOutcome

from shuttle.envelope import ANSWER_RESTARTED

MAIN_AGENT = "agent-main"
# Log events with no AG-UI counterpart a UI needs: the model's prompt, its partial output
# outside the answer (ephemeral, so a rejoin could not give them again), the stream's end.
_SILENT = frozenset({"LLM_PROMPT", "LLM_PARTIAL", "STREAM_END"})

Envelope = dict[str, Any]


@dataclass(frozen=True)
class RunIds:
    """The AG-UI names of a run: its thread (Shuttle's session) and run."""

    thread_id: str
    run_id: str


@dataclass
class _Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, usage: dict[str, Any], cost: Any) -> None:
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)
        self.total_tokens += int(usage.get("total_tokens") or 0)
        self.cost_usd += float(cost or 0.0)


@dataclass
class AgUiTranslator:
    ids: RunIds
    workflow_id: str = ""
    status: str = "running"
    usage: _Usage = field(default_factory=_Usage)
    answers: dict[str, str] = field(default_factory=dict)
    """Open answer message id by agent."""
    iterations: dict[str, str] = field(default_factory=dict)
    """Open iteration step name by agent."""
    agent_steps: list[str] = field(default_factory=list)
    """Open steps of DAG agents, oldest first."""
    messages_made: int = 0

    def translate(self, event: Envelope) -> list[BaseEvent]:
        kind = str(event.get("type", ""))
        if kind in _SILENT:
            return []
        handler = _HANDLERS.get(kind)
        if handler is not None:
            return handler(self, event, event.get("payload") or {})
        return [_custom(event)]

    # -- run ------------------------------------------------------------------------------

    def _started(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        self.workflow_id = str(event.get("workflow_id", ""))
        started = RunStartedEvent(thread_id=self.ids.thread_id, run_id=self.ids.run_id)
        return [started, self.snapshot()]

    def snapshot(self) -> StateSnapshotEvent:
        """The run's state as a UI shows it: status, usage, cost and Shuttle's own ids."""
        usage = self.usage
        return StateSnapshotEvent(
            snapshot={
                "status": self.status,
                "workflow_id": self.workflow_id,
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "total_tokens": usage.total_tokens,
                },
                "cost_usd": round(usage.cost_usd, 6),
            }
        )

    def _completed(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        self.status = "completed"
        finished = RunFinishedEvent(
            thread_id=self.ids.thread_id,
            run_id=self.ids.run_id,
            result=p.get("result", ""),
            outcome=RunFinishedSuccessOutcome(),
        )
        return [*self.close_all(), self.snapshot(), finished]

    def _cancelled(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        self.status = "cancelled"
        finished = RunFinishedEvent(
            thread_id=self.ids.thread_id,
            run_id=self.ids.run_id,
            outcome=RunFinishedCancelledOutcome(),
        )
        return [*self.close_all(), self.snapshot(), finished]

    def _error(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        if not p.get("fatal"):
            return [_custom(event)]
        self.status = "failed"
        message = str(p.get("error_message") or event.get("message") or "the run failed")
        error = RunErrorEvent(message=message, code=str(p.get("error_type") or "") or None)
        return [*self.close_all(), self.snapshot(), error]

    def _paused(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        self.status = "paused" if event.get("type") == "WORKFLOW_PAUSED" else "running"
        return [_custom(event), self.snapshot()]

    def close_all(self) -> list[BaseEvent]:
        """End every open message and step, as AG-UI wants before a run ends."""
        closing: list[BaseEvent] = []
        for agent in list(self.answers):
            closing += self._end_answer(agent)
        for agent in list(self.iterations):
            closing += self._end_iteration(agent)
        while self.agent_steps:
            closing.append(StepFinishedEvent(step_name=self.agent_steps.pop()))
        return closing

    # -- agents and iterations ------------------------------------------------------------

    def _agent_started(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        agent = str(event.get("agent_id", ""))
        if agent in ("", MAIN_AGENT) or agent in self.agent_steps:
            return []
        self.agent_steps.append(agent)
        return [StepStartedEvent(step_name=agent)]

    def _agent_completed(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        agent = str(event.get("agent_id", ""))
        done = [*self._end_answer(agent), *self._end_iteration(agent)]
        if agent in self.agent_steps:
            self.agent_steps.remove(agent)
            done.append(StepFinishedEvent(step_name=agent))
        return done

    def _thinking(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        agent = str(event.get("agent_id", ""))
        iteration = p.get("iteration")
        if p.get("status") == "start":
            prefix = "" if agent in ("", MAIN_AGENT) else f"{agent} "
            step = f"{prefix}iteration {iteration}"
            started = [*self._end_iteration(agent), StepStartedEvent(step_name=step)]
            self.iterations[agent] = step
            return started
        reasoning = str(p.get("reasoning") or "")
        if p.get("status") != "done" or p.get("next_action") != "invoke_tool" or not reasoning:
            return []
        message_id = f"{self.ids.run_id}:{agent}:{iteration}:reasoning"
        return [
            ReasoningStartEvent(message_id=message_id),
            ReasoningMessageStartEvent(message_id=message_id, role="reasoning"),
            ReasoningMessageContentEvent(message_id=message_id, delta=reasoning),
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]

    def _end_iteration(self, agent: str) -> list[BaseEvent]:
        step = self.iterations.pop(agent, None)
        return [] if step is None else [StepFinishedEvent(step_name=step)]

    def _llm_output(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        self.usage.add(p.get("usage") or {}, p.get("cost_usd"))
        return [self.snapshot()]

    # -- tools ----------------------------------------------------------------------------

    def _tool_invoked(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        agent = str(event.get("agent_id", ""))
        call_id = str(p.get("call_id", ""))
        arguments = p.get("tool_args")
        parent = f"{self.ids.run_id}:{agent}:{p.get('iteration')}"
        return [
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=str(p.get("tool_name", "")),
                parent_message_id=parent,
            ),
            ToolCallArgsEvent(
                tool_call_id=call_id, delta=json.dumps(arguments, ensure_ascii=False)
            ),
            ToolCallEndEvent(tool_call_id=call_id),
        ]

    def _tool_observation(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        call_id = str(p.get("call_id", ""))
        content = str(p.get("result") or p.get("error") or "")
        return [
            ToolCallResultEvent(
                message_id=f"{call_id}:result", tool_call_id=call_id, content=content, role="tool"
            )
        ]

    # -- the answer -----------------------------------------------------------------------

    def _open_answer(self, agent: str) -> list[BaseEvent]:
        if agent in self.answers:
            return []
        self.messages_made += 1
        message_id = f"{self.ids.run_id}:answer:{self.messages_made}"
        self.answers[agent] = message_id
        opened = self._end_iteration(agent)
        return [*opened, TextMessageStartEvent(message_id=message_id, role="assistant")]

    def _end_answer(self, agent: str) -> list[BaseEvent]:
        message_id = self.answers.pop(agent, None)
        return [] if message_id is None else [TextMessageEndEvent(message_id=message_id)]

    def _delta(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        agent = str(event.get("agent_id", ""))
        delta = str(p.get("delta") or "")
        if not delta:
            return []
        opened = self._open_answer(agent)
        content = TextMessageContentEvent(message_id=self.answers[agent], delta=delta)
        return [*opened, content]

    def _message_completed(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        agent = str(event.get("agent_id", ""))
        if agent in self.answers:
            return self._end_answer(agent)
        whole = str(p.get("content") or "")
        if not whole:
            return []
        opened = self._open_answer(agent)
        content = TextMessageContentEvent(message_id=self.answers[agent], delta=whole)
        return [*opened, content, *self._end_answer(agent)]

    def _status(self, event: Envelope, p: dict[str, Any]) -> list[BaseEvent]:
        if p.get("kind") != ANSWER_RESTARTED:
            return [_custom(event)]
        # The run moved to another executor, which tells the answer again from its start:
        # the partial message ends here, and the UI is told which one to drop.
        agent = str(event.get("agent_id", ""))
        dropped = self.answers.get(agent, "")
        restarted = CustomEvent(
            name="shuttle.answer_restarted", value={"discard_message_id": dropped, **p}
        )
        return [*self._end_answer(agent), restarted]


def _custom(event: Envelope) -> CustomEvent:
    return CustomEvent(
        name=f"shuttle.{event.get('type', '')}",
        value={
            "seq": event.get("seq"),
            "agent_id": event.get("agent_id", ""),
            "message": event.get("message", ""),
            "payload": event.get("payload") or {},
        },
    )


_Handler = Callable[[AgUiTranslator, Envelope, dict[str, Any]], list[BaseEvent]]
_HANDLERS: dict[str, _Handler] = {
    "WORKFLOW_STARTED": AgUiTranslator._started,
    "WORKFLOW_COMPLETED": AgUiTranslator._completed,
    "WORKFLOW_CANCELLED": AgUiTranslator._cancelled,
    "WORKFLOW_PAUSED": AgUiTranslator._paused,
    "WORKFLOW_RESUMED": AgUiTranslator._paused,
    "ERROR_OCCURRED": AgUiTranslator._error,
    "AGENT_STARTED": AgUiTranslator._agent_started,
    "AGENT_COMPLETED": AgUiTranslator._agent_completed,
    "AGENT_THINKING": AgUiTranslator._thinking,
    "LLM_OUTPUT": AgUiTranslator._llm_output,
    "TOOL_INVOKED": AgUiTranslator._tool_invoked,
    "TOOL_OBSERVATION": AgUiTranslator._tool_observation,
    "THREAD_MESSAGE_DELTA": AgUiTranslator._delta,
    "THREAD_MESSAGE_COMPLETED": AgUiTranslator._message_completed,
    "STATUS_UPDATE": AgUiTranslator._status,
}
