"""One agent's events folded into its LoopState, by the steps the live loop takes itself
(engine/progress.py): each event moves the state as emitting it moved the live one.

Stages with no event of their own (the follow-ups taken when none were pending, an answer
the checklist let through) are passed on the way to the stage the next event belongs to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from services.executor.engine import progress
from services.executor.engine.conversation import relaid
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import Injection, LoopState, RunContext, Stage
from services.executor.policies.budget import TokenBudget
from services.executor.ports import ToolDefinition
from services.executor.recovery.records import (
    Recorded,
    RecoveryError,
    chat_result,
    outcome_of,
    usage_of,
)
from shuttle.envelope import ANSWER_RESTARTED
from shuttle.llm.retry_events import FEATURE_UNSUPPORTED

JSON_MODE_FALLBACK = (FEATURE_UNSUPPORTED, "json_mode")
"""The endpoint refused `tools`, and the agent went on with JSON actions."""

INJECTED_KINDS = (
    "cycle_warning",
    "self_reflection",
    "brevity_request",
    "empty_reply",
    "echoed_prompt",
    "tools_withdrawn",
)
"""What a tool batch, or a reply cut off, calls for on its own (see progress)."""


@dataclass
class AgentRecord:
    """One agent as its log left it."""

    agent_id: str
    role: str
    subtask: str
    prompt: str
    """What the agent was asked (its query)."""
    started_at: float
    """AGENT_STARTED's time (seconds since the epoch)."""
    started_seq: int
    state: LoopState
    taken: set[int] = field(default_factory=set)
    """The seqs of the follow-ups it was given."""


class AgentFold:
    def __init__(
        self,
        started: Recorded,
        settings: AgentSettings,
        ctx: RunContext,
        catalog: Sequence[ToolDefinition],
        budget: TokenBudget | None = None,
    ) -> None:
        payload = started.payload
        subtask = str(payload.get("subtask") or "")
        mode = payload.get("tool_mode") or ("native" if settings.use_native_tools else "json")
        state = progress.new_state(started.agent_id, mode == "native", settings, budget)
        self.record = AgentRecord(
            agent_id=started.agent_id,
            role=str(payload.get("role") or ""),
            subtask=subtask,
            prompt=str(payload.get("prompt") or subtask),
            started_at=started.timestamp,
            started_seq=started.seq,
            state=state,
        )
        self._settings = settings
        self._ctx = ctx
        self._catalog = catalog
        available = [str(name) for name in payload.get("tools_available") or ()]
        if len(available) <= settings.tool_selection_threshold:
            self._begin(available)
        self._handlers: dict[str, Callable[[Recorded], None]] = {
            "AGENT_THINKING": self._thinking,
            "LLM_OUTPUT": self._llm_output,
            "WORKSPACE_UPDATED": self._compacted,
            "STATUS_UPDATE": self._status,
            "TOOL_INVOKED": self._invoked,
            "TOOL_OBSERVATION": self._observed,
            "THREAD_MESSAGE_COMPLETED": self._answered,
            "AGENT_COMPLETED": self._completed,
            "ERROR_RECOVERY": self._recovered,
        }

    @property
    def state(self) -> LoopState:
        return self.record.state

    def apply(self, event: Recorded) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None and self.state.stage is not Stage.DONE:
            handler(event)

    # -- events --------------------------------------------------------------------------

    def _thinking(self, event: Recorded) -> None:
        state = self.state
        if event.get("status") == "start":
            self._advance(event, Stage.CALL)
            if int(event.get("iteration", 0)) != state.iteration:
                self._fail(event, f"iteration {state.iteration} was expected")
            state.stage = Stage.THINKING
        else:
            self._require(event, Stage.DECIDED)
            progress.settle(state, progress.decision_of(state))

    def _llm_output(self, event: Recorded) -> None:
        state = self.state
        phase = event.get("phase")
        usage = usage_of(event.payload)
        if phase == "tool_loop":
            self._require(event, Stage.THINKING)
            state.response = chat_result(event.payload)
            state.stage = Stage.DECIDED
        elif phase == "compact":
            self._advance(event, Stage.CALL, Stage.THINKING)  # THINKING: after an overflow
        else:
            self._advance(event, Stage.ANSWER)
            state.usage += usage
            return  # the answer is not charged to the budget
        state.usage += usage
        state.budget.charge(usage.total_tokens)

    def _compacted(self, event: Recorded) -> None:
        self._advance(event, Stage.CALL, Stage.THINKING)
        conversation = self.state.conversation
        conversation.replace(relaid(conversation.entries, list(event.get("entries") or ())))

    def _status(self, event: Recorded) -> None:
        kind = event.get("kind")
        if kind == "interrupt":
            self._interrupt(event)
        elif kind == "completion_check":
            state = self._advance(event, Stage.FINAL)
            state.checklist.before_final_answer(len(state.steps))
            progress.add(state, self._injection(event, pinned=False))
            progress.next_iteration(state, self._settings.max_iterations)
        elif kind in INJECTED_KINDS:
            state = self._require(event, Stage.INJECT)
            if not state.injections or state.injections[0].kind != kind:
                self._fail(event, f"{state.injections[:1]} was due")
            progress.made(state)
        elif kind == ANSWER_RESTARTED:
            self._advance(event, Stage.ANSWER)
        elif kind == progress.ESCALATED:
            self.state.escalation_reported = True
        elif event.get("phase") == "tools_selected":
            self._require(event, Stage.SELECT)
            usage = usage_of(event.payload)
            self.state.usage += usage
            self.state.budget.charge(usage.total_tokens)
            self._begin([str(name) for name in event.get("selected") or ()])

    def _interrupt(self, event: Recorded) -> None:
        state = self._advance(event, Stage.ACT, Stage.FINAL, Stage.INTERRUPTS)
        stage = state.stage
        progress.add(state, self._injection(event, pinned=True))
        self.record.taken.update(int(seq) for seq in event.get("seqs") or ())
        max_iterations = self._settings.max_iterations
        if stage is Stage.ACT:
            progress.act(state, progress.decision_of(state), True, max_iterations)
        else:
            progress.next_iteration(state, max_iterations)

    def _invoked(self, event: Recorded) -> None:
        self._advance(event, Stage.TOOLS).invoked.add(str(event.get("call_id")))

    def _observed(self, event: Recorded) -> None:
        state = self._require(event, Stage.TOOLS)
        state.outcomes[str(event.get("call_id"))] = outcome_of(event.payload)
        decision = progress.decision_of(state)
        if all(call.call_id in state.outcomes for call in decision.calls):
            progress.finish_batch(state, decision)

    def _recovered(self, event: Recorded) -> None:
        if (event.get("error_type"), event.get("recovery_action")) != JSON_MODE_FALLBACK:
            return
        state = self._require(event, Stage.THINKING)
        progress.to_json_mode(state, progress.offered(self._catalog, state.tools), self._ctx)

    def _answered(self, event: Recorded) -> None:
        state = self._advance(event, Stage.ANSWER)
        state.answer = str(event.get("content") or "")
        state.answered = True

    def _completed(self, event: Recorded) -> None:
        state = self._advance(event, Stage.ANSWER)
        state.answer = str(event.get("result") or "")
        state.iteration = int(event.get("iterations") or state.iteration)
        state.stage = Stage.DONE

    # -- moving on -------------------------------------------------------------------------

    def _begin(self, names: Sequence[str]) -> None:
        tools = progress.offered(self._catalog, names)
        progress.begin(self.state, tools, self.record.prompt, self._ctx)

    def _injection(self, event: Recorded, *, pinned: bool) -> Injection:
        return Injection(str(event.get("kind")), str(event.get("text") or ""), pinned=pinned)

    def _require(self, event: Recorded, *stages: Stage) -> LoopState:
        if self.state.stage not in stages:
            self._fail(event, f"stage {' or '.join(stages)} was expected")
        return self.state

    def _advance(self, event: Recorded, *stages: Stage) -> LoopState:
        """Pass the stages that have no event of their own until one of `stages`."""
        state = self.state
        max_iterations = self._settings.max_iterations
        while state.stage not in stages:
            stage = state.stage
            if stage is Stage.ACT:
                progress.act(state, progress.decision_of(state), False, max_iterations)
            elif stage is Stage.FINAL:
                progress.final_answer(state, progress.decision_of(state))
            elif stage is Stage.INJECT and not state.injections:
                progress.after_injections(state, max_iterations)
            elif stage is Stage.INTERRUPTS:
                progress.next_iteration(state, max_iterations)
            elif stage is Stage.CALL and Stage.ANSWER in stages and state.budget.exhausted:
                progress.end_over_budget(state, None)
            else:
                self._fail(event, f"stage {' or '.join(stages)} was expected")
        return state

    def _fail(self, event: Recorded, why: str) -> None:
        raise RecoveryError(
            f"{event.type} (seq {event.seq}) of agent {event.agent_id!r} does not follow "
            f"from stage {self.state.stage}: {why}"
        )
