"""What one run of the agent carries: its context, and the state of its loop.

`LoopState` is everything the loop knows, and nothing else: the loop mutates it, and the
recovery fold (services/executor/recovery) rebuilds it from the run's log, so a run taken
over goes on from exactly where its log says it was. `stage` is where the loop stands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from services.executor.engine.conversation import Conversation
from services.executor.engine.synthesis import ToolStep
from services.executor.policies.budget import TokenBudget
from services.executor.policies.checklist import CompletionChecklist
from services.executor.policies.cycles import CycleDetector
from services.executor.policies.reflection import SelfReflection
from shuttle.llm.protocol import ChatResult, Message
from shuttle.tool_calls import ToolOutcome
from shuttle.usage import TokenUsage


@dataclass(frozen=True)
class RunContext:
    workflow_id: str
    tenant_id: str
    agent_id: str = "agent-main"
    history: tuple[Message, ...] = ()
    """Earlier turns of the session (user and assistant messages, oldest first)."""
    task_context: Mapping[str, Any] = field(default_factory=dict)
    """What the caller said about the task besides the query; every agent of the run sees it."""


class Stage(StrEnum):
    """Where the loop stands; each stage is entered once the event that leads to it is
    emitted (a stage without an event of its own may be gone through again after a
    takeover, to the same effect)."""

    SELECT = "select"
    """AGENT_STARTED is out; the tools to offer are not chosen yet."""
    CALL = "call"
    """Iteration `iteration` starts: checkpoint, context guard, budget, AGENT_THINKING."""
    THINKING = "thinking"
    """The iteration's model call is in flight."""
    DECIDED = "decided"
    """The model's `response` is on the log (LLM_OUTPUT), not yet acted on."""
    ACT = "act"
    """JSON mode: the assistant message is recorded; follow-ups are taken before acting."""
    FINAL = "final"
    """The model answered without a tool call: follow-ups or the checklist may still turn
    the answer back; else the loop is over."""
    TOOLS = "tools"
    """The response's tool calls run (`invoked` and `outcomes` say how far they got)."""
    INJECT = "inject"
    """The batch is recorded; `injections` are still to be made."""
    INTERRUPTS = "interrupts"
    """Follow-ups are taken, then the next iteration starts."""
    ANSWER = "answer"
    """The loop is over with `answer`; the answer is synthesised (unless `answered`)."""
    DONE = "done"
    """AGENT_COMPLETED is out."""


@dataclass(frozen=True)
class Injection:
    """A message the loop adds on its own (cycle warning, reflection, checklist, follow-ups),
    reported as STATUS_UPDATE{kind}."""

    kind: str
    text: str
    details: Mapping[str, Any] = field(default_factory=dict)
    pinned: bool = False


@dataclass
class LoopState:
    agent_id: str
    native: bool
    """Native function calling, or JSON actions in the text."""
    budget: TokenBudget
    """The run's budget (in a team, one object every step's state shares)."""
    reflection: SelfReflection
    cycles: CycleDetector
    checklist: CompletionChecklist
    tools: list[str] = field(default_factory=list)
    """The tools offered, after selection."""
    conversation: Conversation = field(default_factory=Conversation)
    stage: Stage = Stage.SELECT
    iteration: int = 1
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Every model call of the agent, answer synthesis included."""
    steps: list[ToolStep] = field(default_factory=list)
    interrupted: bool = False
    """Whether any user follow-up was injected."""
    follow_ups: list[str] = field(default_factory=list)
    """The user's follow-ups as injected, for the answer synthesis to obey too."""
    reformat_pending: bool = False
    """JSON mode: the last reply could not be parsed and a reformat was asked for."""
    brevity_asked: bool = False
    escalate_to: int = 0
    """The iteration cap the run may escalate to (a SIMPLE run: STANDARD's; 0: none)."""
    escalated: bool = False
    escalation_reported: bool = False
    tools_withdrawn: bool = False
    """A call repeated past the third cycle warning: no more tools, the answer is asked for."""
    nudged: bool = False
    """An empty reply was just answered with a nudge: another in a row ends the loop."""
    """The last reply was cut off at the output limit and a shorter one was asked for."""
    response: ChatResult | None = None
    """The iteration's model response, from DECIDED until the iteration is over."""
    invoked: set[str] = field(default_factory=set)
    """The batch's call ids whose TOOL_INVOKED is out."""
    outcomes: dict[str, ToolOutcome] = field(default_factory=dict)
    """The batch's outcomes so far, by call id."""
    injections: list[Injection] = field(default_factory=list)
    answer: str = ""
    budget_exceeded: bool = False
    answered: bool = False
    """The agent's answer is on the log (THREAD_MESSAGE_COMPLETED)."""
