"""A whole run's log folded into what the run needs to go on: its route, the control
commands and follow-ups it had, and its agent's state (STANDARD, SIMPLE) or its team's
(COMPLEX)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from services.executor.dag.fallback import FELL_BACK
from services.executor.dag.state import TeamSettings, TeamState
from services.executor.dag.steps import StepLimits, step_settings
from services.executor.engine.settings import AgentSettings
from services.executor.engine.state import RunContext
from services.executor.policies.budget import TokenBudget
from services.executor.ports import Route, ToolDefinition
from services.executor.recovery.agent import AgentFold, AgentRecord
from services.executor.recovery.records import Recorded, usage_of
from services.executor.recovery.team import TeamFold
from shuttle.envelope import TERMINAL_TYPES
from shuttle.workflow_log import LogCommand

CONTROL_TYPES = frozenset(
    {"WORKFLOW_PAUSING", "WORKFLOW_PAUSED", "WORKFLOW_RESUMED", "WORKFLOW_CANCELLING"}
)
EXECUTOR_LOST = "EXECUTOR_LOST"


@dataclass(frozen=True)
class Tuning:
    """What the run's agents ran by, which the fold needs to take the same steps."""

    agent: Callable[[str], AgentSettings]
    """The agent settings of a run in a mode (SIMPLE, STANDARD, COMPLEX)."""
    steps: StepLimits = field(default_factory=StepLimits)
    team: TeamSettings = field(default_factory=TeamSettings)


@dataclass
class RunRecovery:
    last_seq: int = 0
    """The last event folded: the run goes on after it."""
    route: Route | None = None
    """None: WORKFLOW_STARTED is not on the log, the run starts over."""
    started_at: float | None = None
    """WORKFLOW_STARTED's time (seconds since the epoch)."""
    owner: str = ""
    """The executor the log last names as the run's (WORKFLOW_STARTED, ERROR_RECOVERY)."""
    takeovers: int = 0
    """Takeovers after a lapse the log records (ERROR_RECOVERY resumed, not handed over)."""
    ended: bool = False
    """The run's terminal event is on the log."""
    controls: list[LogCommand] = field(default_factory=list)
    follow_ups: list[tuple[int, str]] = field(default_factory=list)
    """The user's follow-ups, (seq, content) in log order."""
    taken: set[int] = field(default_factory=set)
    """The follow-ups the agent (or the team, at its reviews) was given."""
    agent: AgentRecord | None = None
    team: TeamState | None = None
    running: dict[str, AgentRecord] = field(default_factory=dict)
    """COMPLEX: the round's steps started and not over."""


def fold_run(
    events: Sequence[Recorded],
    ctx: RunContext,
    catalog: Sequence[ToolDefinition],
    tuning: Tuning,
) -> RunRecovery:
    """The run as `events` (its durable events in seq order, tool results whole) left it."""
    recovery = RunRecovery()
    agent: AgentFold | None = None
    team: TeamFold | None = None
    settings: AgentSettings | None = None
    for event in events:
        recovery.last_seq = event.seq
        kind = event.type
        if kind == "WORKFLOW_STARTED":
            mode = str(event.get("mode") or "STANDARD")
            routing = usage_of(event.get("routing") or {})
            recovery.route = Route(mode, float(event.get("estimated_complexity") or 0.0), routing)
            recovery.started_at = event.timestamp
            recovery.owner = str(event.get("executor") or "")
            settings = tuning.agent(mode)
            if mode == "COMPLEX":
                team = TeamFold(
                    step_settings(settings, tuning.steps),
                    tuning.team,
                    ctx,
                    catalog,
                    lambda: recovery.follow_ups,
                )
                team.state.own_usage += routing
                team.state.budget.charge(routing.total_tokens)
            continue
        if kind == "STATUS_UPDATE" and event.get("kind") == FELL_BACK and recovery.route:
            # The team never ran a step: the run goes on as the STANDARD agent it became.
            spent = recovery.route.usage + usage_of(event.payload)
            recovery.route = Route("STANDARD", recovery.route.estimated_complexity, spent)
            settings, team = tuning.agent("STANDARD"), None
            continue
        if kind in CONTROL_TYPES:
            recovery.controls.append(LogCommand(event.seq, kind, event.payload))
        elif kind == "MESSAGE_RECEIVED" and event.get("from") == "user":
            recovery.follow_ups.append((event.seq, str(event.get("content") or "")))
        elif kind == "ERROR_RECOVERY" and _resumed(event):
            recovery.takeovers += 0 if event.get("handed_over") else 1
            recovery.owner = str(event.get("owner") or "")
        elif kind in TERMINAL_TYPES or (kind == "ERROR_OCCURRED" and event.get("fatal")):
            recovery.ended = True
        budget = team.state.budget if team is not None else agent.state.budget if agent else None
        if budget is not None:
            _budget_event(budget, event)
        if team is not None:
            team.apply(event)
        elif settings is not None and event.agent_id == ctx.agent_id:
            if kind == "AGENT_STARTED":
                agent = AgentFold(event, settings, ctx, catalog)
                if recovery.route is not None:  # routing is charged to the run's agent
                    agent.state.usage += recovery.route.usage
                    agent.state.budget.charge(recovery.route.usage.total_tokens)
            elif agent is not None:
                agent.apply(event)
    if agent is not None:
        recovery.agent = agent.record
        recovery.taken = agent.record.taken
    if team is not None:
        recovery.team = team.state
        recovery.running = team.running
        recovery.taken = team.taken
    return recovery


def _resumed(event: Recorded) -> bool:
    return bool(
        event.get("error_type") == EXECUTOR_LOST and event.get("recovery_action") == "resumed"
    )


def _budget_event(budget: TokenBudget, event: Recorded) -> None:
    """The budget's reports say what it had reported (a model call whose LLM_OUTPUT did not
    make it to the log is charged again when it is made again, and not reported twice)."""
    if event.type == "BUDGET_THRESHOLD":
        budget.warned = True
    elif event.type == "ERROR_OCCURRED" and event.get("error_type") == "BUDGET_EXCEEDED":
        budget.exhaustion_seen = True
