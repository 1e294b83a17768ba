"""How the loop's state moves on from what it already holds: the steps that call nothing
(no model, no tool, no log), shared by the live loop and the fold that rebuilds its state
from the log, so that both arrive at the same state by the same code."""

from __future__ import annotations

from collections.abc import Sequence

from services.executor.engine.conversation import Conversation, Entry, context_note
from services.executor.engine.modes import Decision, JsonMode, Mode, NativeMode
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import Injection, LoopState, RunContext, Stage
from services.executor.engine.synthesis import (
    ToolStep,
    budget_answer,
    echoes_prompt,
    fallback_answer,
)
from services.executor.policies.budget import TokenBudget
from services.executor.policies.checklist import CompletionChecklist
from services.executor.policies.cycles import CycleDetector
from services.executor.policies.interrupts import FollowUps
from services.executor.policies.reflection import SelfReflection
from services.executor.ports import ToolDefinition

ESCALATED = "escalated"
"""STATUS_UPDATE kind: a SIMPLE run went on as STANDARD."""
MAX_CYCLE_WARNINGS = 3
"""Warnings a repeated call gets; one more repeat and the run stops offering tools."""
TOOLS_WITHDRAWN_PROMPT = (
    "You kept calling the same tool with the same arguments after being warned. No more "
    "tools are available: answer now with what you have."
)
EMPTY_REPLY_PROMPT = "Your last reply was empty. Reply again: call a tool, or give your answer."
ECHOED_PROMPT = (
    "Your last reply repeated your instructions instead of answering. Reply again: call a "
    "tool, or give your answer."
)
BREVITY_PROMPT = (
    "Your last reply was cut off at the output limit and was not used. Reply again, "
    "briefly: a single tool call, or the answer in a few sentences."
)
CUT_OFF = "length"
"""The finish reason of a reply that hit the output limit."""

NATIVE: Mode = NativeMode()
JSON: Mode = JsonMode()


def mode_of(state: LoopState) -> Mode:
    return NATIVE if state.native else JSON


def new_state(
    agent_id: str, native: bool, settings: AgentSettings, budget: TokenBudget | None = None
) -> LoopState:
    """An agent's state once AGENT_STARTED is out; `budget` when it spends a shared one."""
    return LoopState(
        agent_id=agent_id,
        native=native,
        escalate_to=settings.escalate_max_iterations,
        budget=budget or TokenBudget(settings.token_budget, settings.budget_warn_percent),
        reflection=SelfReflection(settings.reflection_interval),
        cycles=CycleDetector(settings.cycle_threshold),
        checklist=CompletionChecklist(
            settings.completion_check, settings.completion_check_min_tools
        ),
    )


def offered(catalog: Sequence[ToolDefinition], names: Sequence[str]) -> list[ToolDefinition]:
    """The definitions of the tools named, in catalog order."""
    wanted = set(names)
    return [t for t in catalog if t.name in wanted]


def begin(state: LoopState, tools: Sequence[ToolDefinition], query: str, ctx: RunContext) -> None:
    """Offer `tools` and open the conversation: the system prompt, the session, the query."""
    conversation = Conversation()
    system = mode_of(state).system_prompt(tools) + context_note(ctx.task_context)
    conversation.add({"role": "system", "content": system})
    conversation.add_history(ctx.history)
    conversation.add_user(query, pinned=True)
    state.tools = [t.name for t in tools]
    state.conversation = conversation
    state.iteration = 1
    state.stage = Stage.CALL


def to_json_mode(state: LoopState, tools: Sequence[ToolDefinition], ctx: RunContext) -> None:
    """The endpoint refused `tools`: the same conversation goes on with JSON actions, under
    the JSON mode's system prompt."""
    state.native = False
    entries = state.conversation.entries
    note = context_note(ctx.task_context)
    system = Entry({"role": "system", "content": JSON.system_prompt(tools) + note})
    state.conversation.replace([system, *entries[1:]])


def decision_of(state: LoopState) -> Decision:
    assert state.response is not None, f"no response at stage {state.stage}"
    offered = () if state.tools_withdrawn else state.tools
    return mode_of(state).decide(state.response, state.agent_id, state.iteration, offered)


def next_iteration(state: LoopState, max_iterations: int) -> None:
    state.response = None
    cap = state.escalate_to if state.escalated else max_iterations
    if state.iteration >= cap:
        # A SIMPLE run whose model is still calling tools at its cap was routed too low: it
        # goes on as STANDARD rather than answering with a summary of its tools.
        still_calling = bool(state.steps) and state.steps[-1].iteration == state.iteration
        if not (still_calling and not state.escalated and state.escalate_to > cap):
            _answer(state, fallback_answer(state.steps))
            return
        state.escalated = True
    state.iteration += 1
    state.stage = Stage.CALL


def end_over_budget(state: LoopState, decision: Decision | None) -> None:
    final = decision is not None and not decision.calls and not decision.parse_failed
    draft = decision.answer if decision is not None and final else ""
    state.budget_exceeded = True
    _answer(state, budget_answer(state.steps, state.budget.budget, draft))


def settle(state: LoopState, decision: Decision) -> None:
    """What the response decided, once AGENT_THINKING{done} is out."""
    mode = mode_of(state)
    assert state.response is not None
    if state.budget.exhausted:
        # Spent by this call or, in a team, by another agent's meanwhile.
        end_over_budget(state, decision)
    elif state.response.finish_reason == CUT_OFF:
        _cut_off(state)
    elif decision.empty:
        _unusable_reply(state, "empty_reply", EMPTY_REPLY_PROMPT)
    elif not decision.calls and echoes_prompt(decision.answer, instructions(state)):
        # Small models give their system prompt back as the answer.
        _unusable_reply(state, "echoed_prompt", ECHOED_PROMPT)
    elif state.tools_withdrawn and decision.calls:
        _answer(state, fallback_answer(state.steps))  # asked for the answer, it called again
    elif decision.parse_failed:
        # JSON mode: one reformat request; a second unparsable reply is the answer as is,
        # unless it holds nothing.
        if state.reformat_pending:
            _answer(
                state, decision.answer if decision.answer.strip() else fallback_answer(state.steps)
            )
            return
        state.reformat_pending = True
        mode.record_parse_failure(state.conversation, state.response)
        state.stage = Stage.INTERRUPTS
    else:
        state.reformat_pending = False
        state.brevity_asked = False
        state.nudged = False
        mode.record_assistant(state.conversation, state.response, decision)
        if mode.drains_after_assistant:
            state.stage = Stage.ACT
        else:
            state.stage = Stage.TOOLS if decision.calls else Stage.FINAL


def _cut_off(state: LoopState) -> None:
    """A reply cut off at the output limit is never taken as the answer, nor its tool calls
    (their arguments are cut too): one request to be brief, then the fallback answer."""
    if state.brevity_asked:
        _answer(state, fallback_answer(state.steps))
        return
    state.brevity_asked = True
    state.injections = [Injection("brevity_request", BREVITY_PROMPT)]
    state.stage = Stage.INJECT


def _unusable_reply(state: LoopState, kind: str, prompt: str) -> None:
    """A reply with no call and nothing of its own to say (empty, or the instructions given
    back) is never the answer: one nudge, then the fallback."""
    if state.nudged:
        _answer(state, fallback_answer(state.steps))
        return
    state.nudged = True
    state.injections = [Injection(kind, prompt)]
    state.stage = Stage.INJECT


def instructions(state: LoopState) -> str:
    """The agent's system prompt."""
    entries = state.conversation.entries
    if entries and entries[0].message.get("role") == "system":
        return str(entries[0].message.get("content") or "")
    return ""


def act(state: LoopState, decision: Decision, interrupted: bool, max_iterations: int) -> None:
    """JSON mode, after the follow-ups were taken: a pending answer gives way to them."""
    if decision.calls:
        state.stage = Stage.TOOLS
    elif interrupted:
        next_iteration(state, max_iterations)
    else:
        state.stage = Stage.FINAL


def final_answer(state: LoopState, decision: Decision) -> None:
    _answer(state, decision.answer)


def finish_batch(state: LoopState, decision: Decision) -> None:
    """Every call of the batch has its outcome: record them, and what they call for."""
    outcomes = [state.outcomes[call.call_id] for call in decision.calls]
    mode_of(state).record_results(state.conversation, decision.calls, outcomes)
    injections: list[Injection] = []
    for call, outcome in zip(decision.calls, outcomes, strict=True):
        state.steps.append(ToolStep(state.iteration, call.name, call.arguments_json, outcome))
        warning = state.cycles.observe(call.name, call.arguments_json)
        if warning:
            injections.append(Injection("cycle_warning", warning, {"tool_name": call.name}))
        repeated = state.cycles.warnings(call.name, call.arguments_json) > MAX_CYCLE_WARNINGS
        if repeated and not state.tools_withdrawn:
            state.tools_withdrawn = True
            injections.append(Injection("tools_withdrawn", TOOLS_WITHDRAWN_PROMPT))
    reflection = state.reflection.after_tool_calls(len(decision.calls))
    if reflection:
        injections.append(
            Injection("self_reflection", reflection, {"tool_calls": len(state.steps)})
        )
    state.invoked = set()
    state.outcomes = {}
    state.injections = injections
    state.stage = Stage.INJECT


def made(state: LoopState) -> Injection:
    """The first pending injection, now made."""
    injection = state.injections.pop(0)
    add(state, injection)
    return injection


def after_injections(state: LoopState, max_iterations: int) -> None:
    # Native mode takes follow-ups only after the tool results: `tool` messages must follow
    # their assistant message directly.
    if mode_of(state).drains_after_assistant:
        next_iteration(state, max_iterations)
    else:
        state.stage = Stage.INTERRUPTS


def interrupt(follow_ups: FollowUps) -> Injection:
    return Injection("interrupt", follow_ups.text, {"seqs": list(follow_ups.seqs)}, pinned=True)


def add(state: LoopState, injection: Injection) -> None:
    state.conversation.add_user(injection.text, pinned=injection.pinned)
    if injection.kind == "interrupt":
        state.interrupted = True
        state.follow_ups.append(injection.text)


def _answer(state: LoopState, answer: str) -> None:
    state.answer = answer
    state.response = None
    state.stage = Stage.ANSWER
