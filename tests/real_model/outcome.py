"""What one real-model run came to, as docs/real-models.md reports it: its time, iterations,
calls and answer, and what the engine did with the model's mistakes on the way."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shuttle.client.models import Event
from tests.real_model.model_calls import ModelCall
from tests.real_model.tasks import RealTask

RESULTS_DIR = Path("var/real-model")
TERMINAL = ("WORKFLOW_COMPLETED", "WORKFLOW_CANCELLED")


@dataclass
class Outcome:
    name: str
    exercises: str
    models: str
    mode: str
    seconds: float
    iterations: int
    model_calls: int
    longest_call_seconds: float
    tools: list[str]
    ended: str
    answer: str
    plan: list[str] = field(default_factory=list)
    """A COMPLEX run's first plan: its steps' tasks."""
    handled: list[str] = field(default_factory=list)

    def save(self, results_dir: Path = RESULTS_DIR) -> None:
        results_dir.mkdir(parents=True, exist_ok=True)
        (results_dir / f"{self.name}.json").write_text(json.dumps(asdict(self), indent=1))


def outcome_of(task: RealTask, events: list[Event], calls: list[ModelCall]) -> Outcome:
    started = next(e for e in events if e.type == "WORKFLOW_STARTED")
    ended = next((e for e in events if e.type in TERMINAL or fatal(e)), events[-1])
    assert started.timestamp is not None and ended.timestamp is not None
    mode = str(started.payload.get("mode"))
    switches = [e.payload for e in events if e.type == "STATUS_UPDATE"]
    for switch in switches:
        if switch.get("kind") in ("fell_back", "escalated"):
            mode += " → STANDARD"
    answer = str(ended.payload.get("result") or "") if ended.type == TERMINAL[0] else ""
    return Outcome(
        name=task.name,
        exercises=task.exercises,
        models=task.models,
        mode=mode,
        seconds=round((ended.timestamp - started.timestamp).total_seconds(), 1),
        iterations=sum(
            1 for e in events if e.type == "AGENT_THINKING" and e.payload.get("status") == "start"
        ),
        model_calls=len(calls),
        longest_call_seconds=round(max((c.seconds for c in calls), default=0.0), 1),
        tools=[str(e.payload.get("tool_name")) for e in events if e.type == "TOOL_INVOKED"],
        ended=ended.type,
        answer=clipped(answer),
        plan=first_plan(events),
        handled=handling(events, calls),
    )


def clipped(text: str, chars: int = 140) -> str:
    return " ".join(text.split())[:chars]


def first_plan(events: list[Event]) -> list[str]:
    for event in events:
        if event.type == "STATUS_UPDATE" and event.payload.get("phase") == "planned":
            return [clipped(str(step.get("task")), 60) for step in event.payload["steps"]]
    return []


def fatal(event: Event) -> bool:
    return event.type == "ERROR_OCCURRED" and bool(event.payload.get("fatal"))


def handling(events: list[Event], calls: list[ModelCall]) -> list[str]:
    """The engine's answers to the model's mistakes and the server's limits, counted."""
    seen: Counter[str] = Counter()
    for event in events:
        payload: dict[str, Any] = event.payload
        if event.type == "STATUS_UPDATE" and payload.get("kind"):
            seen[f"STATUS_UPDATE {payload['kind']}"] += 1
        elif event.type == "ERROR_RECOVERY":
            seen[f"{payload.get('error_type')} → {payload.get('recovery_action')}"] += 1
        elif event.type == "ERROR_OCCURRED":
            seen[f"{payload.get('error_type')} (fatal: {payload.get('fatal')})"] += 1
        elif event.type == "TOOL_OBSERVATION" and payload.get("error"):
            seen[f"tool error: {str(payload['error'])[:60]}"] += 1
        elif event.type == "WORKSPACE_UPDATED" and payload.get("action") == "COMPACT":
            seen["context compacted"] += 1
    cut = sum(1 for c in calls if c.finish_reason == "length")
    if cut:
        seen["replies cut at max_tokens"] += cut
    refused = sum(1 for c in calls if c.status >= 400)
    if refused:
        seen["requests the server refused"] += refused
    return [f"{what} ({count} times)" if count > 1 else what for what, count in seen.items()]
