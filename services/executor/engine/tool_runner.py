"""Runs one response's tool calls concurrently and reports each as it starts and ends.

A batch taken over part-way runs only what has no outcome on the log yet: a call whose
TOOL_INVOKED is out already is not announced again, and is sent again under its call id,
which the tools service's ledger answers with the first run's outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from dataclasses import replace

from services.executor.engine.modes import ToolRequest
from services.executor.engine.state import LoopState, RunContext
from services.executor.log.reporter import RunReporter
from services.executor.ports import ToolPort
from shuttle.tool_calls import ToolCall, ToolOutcome

log = logging.getLogger(__name__)


class ToolRunner:
    def __init__(
        self,
        tools: ToolPort,
        reporter: RunReporter,
        ctx: RunContext,
        offered: Collection[str],
        timeout_seconds: float,
    ) -> None:
        self._tools = tools
        self._reporter = reporter
        self._ctx = ctx
        self._offered = set(offered)
        self._timeout = timeout_seconds

    async def run_batch(
        self, iteration: int, calls: Sequence[ToolRequest], state: LoopState
    ) -> None:
        """Every call's outcome into `state.outcomes`."""
        pending = [call for call in calls if call.call_id not in state.outcomes]
        if len(pending) == 1:
            await self._run(iteration, pending[0], state)
        elif pending:
            await asyncio.gather(*(self._run(iteration, call, state) for call in pending))

    async def _run(self, iteration: int, call: ToolRequest, state: LoopState) -> None:
        agent_id = self._ctx.agent_id
        if call.call_id not in state.invoked:
            await self._reporter.tool_invoked(
                agent_id, iteration, call.call_id, call.name, call.arguments_json, self._timeout
            )
            state.invoked.add(call.call_id)
        outcome = await self._execute(call)
        if outcome.call_id != call.call_id:
            outcome = replace(outcome, call_id=call.call_id)
        if outcome.processed is not None:
            # One producer for the call's events keeps them in order on the log.
            await self._reporter.data_processing(
                agent_id, call.name, call.call_id, outcome.processed
            )
        await self._reporter.tool_observation(agent_id, iteration, call.call_id, call.name, outcome)
        state.outcomes[call.call_id] = outcome

    async def _execute(self, call: ToolRequest) -> ToolOutcome:
        if call.name not in self._offered:
            available = ", ".join(sorted(self._offered)) or "none"
            message = f"Unknown tool {call.name!r}. Available tools: {available}."
            return ToolOutcome(observation=message, error=f"unknown tool {call.name!r}")
        invocation = ToolCall(
            tool_name=call.name,
            arguments_json=call.arguments_json,
            call_id=call.call_id,
            workflow_id=self._ctx.workflow_id,
            tenant_id=self._ctx.tenant_id,
            agent_id=self._ctx.agent_id,
        )
        try:
            return await self._tools.execute(invocation)
        except Exception as exc:
            # A tool host that breaks its contract still must not end the run.
            log.exception("tool host raised", extra={"workflow_id": self._ctx.workflow_id})
            message = f"tool {call.name} failed: {type(exc).__name__}: {exc}"
            return ToolOutcome(observation=message, error=message)
