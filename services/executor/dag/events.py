"""The team's events (TEAM_*, ROLE_ASSIGNED, DEPENDENCY_SATISFIED, MESSAGE_SENT/RECEIVED,
PROGRESS), payloads as the reference catalogue has them, on the run's ordered emitter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.executor.log.reporter import RunReporter
from shuttle.usage import TokenUsage
from shuttle.workflow_log import EventDraft


@dataclass(frozen=True)
class Member:
    agent_id: str
    role: str
    capabilities: tuple[str, ...]
    model: str

    def as_payload(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "role": self.role,
            "capabilities": list(self.capabilities),
            "model": self.model,
        }


class TeamReporter:
    def __init__(self, reporter: RunReporter) -> None:
        self._reporter = reporter

    async def _emit(
        self, type_: str, message: str, payload: Mapping[str, Any], agent_id: str = ""
    ) -> None:
        await self._reporter.emit(EventDraft(type_, message, payload, agent_id))

    async def recruited(self, members: Sequence[Member], round_number: int) -> None:
        payload = {
            "team_size": len(members),
            "agents": [m.as_payload() for m in members],
            "round": round_number,
        }
        await self._emit("TEAM_RECRUITED", f"Team recruited: {len(members)} agents", payload)

    async def role_assigned(self, member: Member, tools: Sequence[str]) -> None:
        payload = {
            "role": member.role,
            "capabilities": list(member.capabilities),
            "tools": list(tools),
            "model": member.model,
        }
        await self._emit("ROLE_ASSIGNED", f"Role assigned: {member.role}", payload, member.agent_id)

    async def status(
        self, active: int, idle: int, completed: int, remaining: int, parallel: bool
    ) -> None:
        payload = {
            "active_agents": active,
            "idle_agents": idle,
            "tasks_completed": completed,
            "tasks_remaining": remaining,
            "coordination_mode": "parallel" if parallel else "sequential",
        }
        await self._emit("TEAM_STATUS", "Team progress update", payload)

    async def dependency_satisfied(self, step_id: str, dependencies: Sequence[str]) -> None:
        payload = {
            "subtask_id": step_id,
            "satisfied_dependencies": list(dependencies),
            "can_proceed": True,
        }
        await self._emit(
            "DEPENDENCY_SATISFIED", f"Dependencies satisfied for {step_id}", payload, step_id
        )

    async def handoff(self, sender: str, receiver: str, content: str) -> None:
        """One step's result handed to a step that depends on it: sent, then received."""
        sent = {"to": receiver, "content": content, "message_type": "HANDOFF"}
        await self._emit("MESSAGE_SENT", f"Message sent to {receiver}", sent, sender)
        received = {"from": sender, "content": content, "acknowledged": True}
        await self._emit("MESSAGE_RECEIVED", f"Message received from {sender}", received, receiver)

    async def progress(self, done: int, total: int, current_task: str) -> None:
        percentage = round(100 * done / total) if total else 100
        payload = {
            "percentage": percentage,
            "current_step": done,
            "total_steps": total,
            "current_task": current_task,
        }
        await self._emit("PROGRESS", f"Progress: step {done} of {total}", payload)

    async def step_failed(self, step_id: str, error_type: str, reason: str) -> None:
        await self._reporter.error(
            error_type,
            reason,
            fatal=False,
            agent_id=step_id,
            extra={"subtask_id": step_id},
        )

    async def retired(
        self, team_size: int, duration_ms: int, usage: TokenUsage, reason: str
    ) -> None:
        payload = {
            "team_size": team_size,
            "duration_ms": duration_ms,
            "total_tokens": usage.total_tokens,
            "reason": reason,
        }
        await self._emit("TEAM_RETIRED", f"Team retired: {reason.replace('_', ' ')}", payload)
