"""A team stopped by the run deadline (engine/deadline.py) answers from what it has."""

from __future__ import annotations

from services.executor.dag.state import TeamState
from services.executor.dag.synthesis import SYNTHESIS_AGENT, steps_found
from services.executor.log.reporter import RunReporter


async def answer_team(reporter: RunReporter, state: TeamState) -> str:
    """A team stopped by the deadline answers with its draft, else its steps' results."""
    if state.answered:
        return state.answer
    found = steps_found([*state.outcomes, *state.round_outcomes.values()])
    if state.draft.strip():
        answer = state.draft.strip()
    elif found:
        answer = f"The task ran out of time. What its steps found:\n{found}"
    else:
        answer = "The task ran out of time before any of its steps finished."
    await reporter.answer_completed(SYNTHESIS_AGENT, answer, 0)
    state.answer, state.answered = answer, True
    return answer
