"""The takeover matrix's frame: a run is brought to a kill point, the executor holding its
lease is killed (-9), and the run must end as an uninterrupted run of the same script does.

What is checked for every run (`run_problems`): it ends WORKFLOW_COMPLETED with the answer of
the uninterrupted run; every call id has exactly one TOOL_OBSERVATION; every side effect took
place once per call id (the lines `file_ops` appended to the run's workspace, the provider's
executions per call id and per idempotency key); each subscriber got seqs 1..last_seq, none
twice, and STREAM_END; a run of the killed executor carries ERROR_RECOVERY{recovery_action:
"resumed", error_type: "EXECUTOR_LOST"} and the others none. The per-owner audit of
harness.py runs over every run too.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import httpx

from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.chaos.effect_provider import EffectProvider
from tests.chaos.harness import (
    TENANT,
    RunAudit,
    is_resumption,
    is_terminal,
    read_log,
    wait_until,
)
from tests.chaos.scenario import Scenario
from tests.chaos.subscriber import Subscription
from tests.chaos.takeover_model import APPROVED_TOOL, EFFECTS_FILE, PROVIDER_TOOL, TakeoverModel

LEASE_SECONDS = 1.5
TAKEOVER_POLL_SECONDS = 0.2
MAX_TAKEOVERS = 2
TAKEOVER_ENV = {
    "SHUTTLE_RUN_LEASE_SECONDS": str(LEASE_SECONDS),
    "SHUTTLE_RUN_TAKEOVER_POLL_SECONDS": str(TAKEOVER_POLL_SECONDS),
    "SHUTTLE_RUN_MAX_TAKEOVERS": str(MAX_TAKEOVERS),
    "SHUTTLE_EVENTS_LEASE_SWEEP_SECONDS": "0.5",
    # Long enough for a restarted executor to come back; a run nobody takes fails after it.
    "SHUTTLE_EVENTS_ORPHAN_SECONDS": "90",
    "SHUTTLE_TOOL_TIMEOUT_SECONDS": "300",
    "SHUTTLE_AUTH": "off",
    "SHUTTLE_RATE_LIMIT": "100000/minute",
    "SHUTTLE_TENANT_MAX_RUNS": "0",
}
EFFECT_TOOLS = (PROVIDER_TOOL, APPROVED_TOOL)


@dataclass
class Kit:
    """What every takeover stack talks to: the model and the counting tool provider."""

    model: TakeoverModel
    provider: EffectProvider

    def environment(self, workspace_root: Path) -> dict[str, str]:
        return {
            **TAKEOVER_ENV,
            "SHUTTLE_TOOL_PROVIDERS": f'{{"chaos": "{self.provider.target}"}}',
            "SHUTTLE_TOOL_WORKSPACE_DIR": str(workspace_root),
        }

    def release_all(self) -> None:
        self.model.release_all()
        self.provider.release_all()


class TakeoverStack(Protocol):
    name: str
    workspace_root: Path
    restarts_itself: bool
    """Whether the stack starts a killed executor again by itself (`shuttle up`)."""

    @property
    def gateways(self) -> list[str]: ...

    def channel(self, service: str) -> grpc.aio.Channel: ...

    def kill_executor(self, pid: int) -> None:
        """kill -9 the executor with this pid (one of the stack's, or AssertionError)."""

    def revive(self) -> None:
        """Return once every executor of the stack is running and healthy again."""


@dataclass
class ChaosRun:
    question: str
    workflow_id: str = ""
    subscriptions: list[Subscription] = field(default_factory=list)
    owner: str = ""
    """The lease owner when the executor was killed."""
    notes: dict[str, Any] = field(default_factory=dict)
    """What a kill point learnt on the way (e.g. the approval id)."""

    @property
    def watcher(self) -> Subscription:
        return self.subscriptions[0]


@dataclass
class Context:
    stack: TakeoverStack
    kit: Kit
    chaos: Scenario
    other: httpx.AsyncClient
    """The last gateway: another replica than the one runs were submitted to, if any."""


@asynccontextmanager
async def frame(stack: TakeoverStack, kit: Kit) -> AsyncIterator[Context]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
    timeout = httpx.Timeout(30.0, read=None)
    first, *others = stack.gateways
    async with (
        httpx.AsyncClient(base_url=first, timeout=timeout, limits=limits) as client,
        httpx.AsyncClient(base_url=stack.gateways[-1], timeout=timeout, limits=limits) as last,
        stack.channel("events") as channel,
    ):
        fallbacks = [httpx.AsyncClient(base_url=url, timeout=timeout) for url in others]
        chaos = Scenario(client, channel, fallbacks=fallbacks)
        try:
            yield Context(stack, kit, chaos, last)
        finally:
            chaos.cancel()
            for fallback in fallbacks:
                await fallback.aclose()


def tag(label: str) -> str:
    """A label unique to this test run: no question is a substring of another's."""
    return f"{label} {uuid.uuid4().hex[:10]}"


async def start_run(ctx: Context, run: ChaosRun, mode: str, subscribers: int) -> None:
    response = await ctx.chaos.client.post(
        "/api/v1/tasks", json={"query": run.question, "mode": mode}
    )
    assert response.status_code == 201, response.text
    run.workflow_id = response.json()["workflow_id"]
    ctx.chaos.workflow_ids.append(run.workflow_id)
    run.subscriptions = [ctx.chaos.subscribe(run.workflow_id) for _ in range(subscribers)]


async def workflow(channel: grpc.aio.Channel, workflow_id: str) -> events_pb2.Workflow:
    stub = events_pb2_grpc.EventServiceStub(channel)
    request = events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT)
    found: events_pb2.Workflow = await stub.GetWorkflow(request, timeout=10)
    return found


def owner_pid(owner: str) -> int:
    """The pid in a lease owner (host:pid:random)."""
    parts = owner.split(":")
    assert len(parts) >= 3 and parts[-2].isdigit(), f"not a lease owner: {owner!r}"
    return int(parts[-2])


def seen(sub: Subscription, kind: str, **payload: Any) -> list[dict[str, Any]]:
    """The events of `kind` (with these payload values) the subscriber has received."""
    return [
        e
        for e in sub.events
        if e["type"] == kind and all(e["payload"].get(k) == v for k, v in payload.items())
    ]


async def wait_for_event(sub: Subscription, what: str, kind: str, **payload: Any) -> None:
    """Until `sub` has an event of `kind`; AssertionError at once if the run ended first."""

    async def arrived() -> bool:
        if seen(sub, kind, **payload):
            return True
        ended = [e for e in sub.events if is_terminal(e)]
        assert not ended, f"{sub.workflow_id} ended before {what}: {ended[-1]}"
        return False

    await wait_until(arrived, what, timeout_seconds=180)


async def wait_for_resumption(sub: Subscription) -> float:
    """Seconds until `sub`'s run is resumed by another executor (ERROR_RECOVERY resumed)."""
    started = time.monotonic()

    async def resumed() -> bool:
        if any(is_resumption(e) for e in sub.events):
            return True
        ended = [e for e in sub.events if is_terminal(e)]
        assert not ended, (
            f"{sub.workflow_id} ended without being taken over: {ended[-1]['payload']}"
        )
        return False

    await wait_until(resumed, f"{sub.workflow_id} is resumed", timeout_seconds=180)
    return time.monotonic() - started


def final_answer(log: Sequence[dict[str, Any]]) -> str | None:
    done = [e for e in log if e["type"] == "WORKFLOW_COMPLETED"]
    return str(done[-1]["payload"].get("result")) if done else None


def effect_problems(
    kit: Kit, workspace_root: Path, workflow_id: str, log: Sequence[dict[str, Any]]
) -> list[str]:
    """Each side-effecting call of the log took effect exactly once, and nothing else did."""
    calls = {e["payload"]["call_id"]: e["payload"] for e in log if e["type"] == "TOOL_INVOKED"}
    problems = []
    wanted_lines = Counter(
        str(p["tool_args"]["content"]) for p in calls.values() if p["tool_name"] == "file_ops"
    )
    path = workspace_root / TENANT / workflow_id / EFFECTS_FILE
    lines = Counter(path.read_text().splitlines(keepends=True) if path.exists() else [])
    if lines != wanted_lines:
        problems.append(f"{EFFECTS_FILE} holds {dict(lines)}, the calls wrote {dict(wanted_lines)}")
    wanted = {cid: 1 for cid, p in calls.items() if p["tool_name"] in EFFECT_TOOLS}
    if dict(kit.provider.effects(workflow_id)) != wanted:
        problems.append(f"provider effects {dict(kit.provider.effects(workflow_id))} != {wanted}")
    keys = kit.provider.keys(workflow_id)
    if any(keys):  # a tools service that sends idempotency keys: one effect per key
        wanted_keys = {f"{workflow_id}/{cid}": 1 for cid in wanted}
        if dict(keys) != wanted_keys:
            problems.append(f"idempotency keys {dict(keys)} != {wanted_keys}")
    return problems


def run_problems(
    kit: Kit,
    stack: TakeoverStack,
    run: ChaosRun,
    log: Sequence[dict[str, Any]],
    reference: str | None,
    resumed: bool | None,
) -> list[str]:
    """Everything wrong with one run (see the module docstring); `resumed`: whether it must
    (True) or must not (False) have been taken over, None for either."""
    problems = []
    types = [e["type"] for e in log]
    if types[-2:] != ["WORKFLOW_COMPLETED", "STREAM_END"]:
        ending = [e for e in log if is_terminal(e)]
        problems.append(f"ended {types[-2:]}: {ending[-1]['payload'] if ending else 'no end'}")
    answer = final_answer(log)
    if answer != reference:
        problems.append(f"answer {answer!r} differs from the uninterrupted run's {reference!r}")
    observed = Counter(e["payload"]["call_id"] for e in log if e["type"] == "TOOL_OBSERVATION")
    invoked = {e["payload"]["call_id"] for e in log if e["type"] == "TOOL_INVOKED"}
    if set(observed) != invoked or any(n != 1 for n in observed.values()):
        problems.append(f"observations per call id {dict(observed)}, invoked {sorted(invoked)}")
    problems += effect_problems(kit, stack.workspace_root, run.workflow_id, log)
    last = int(log[-1]["seq"]) if log else 0
    for sub in run.subscriptions:
        if sub.seqs != list(range(1, last + 1)) or not sub.ended:
            problems.append(f"a subscriber got seqs {sub.seqs} (ended: {sub.ended}), not 1..{last}")
    resumptions = [e for e in log if is_resumption(e)]
    if resumed and not resumptions:
        problems.append("no ERROR_RECOVERY{recovery_action: resumed} in the log")
    if resumed is False and resumptions:
        problems.append(f"resumed although its executor lived: {resumptions}")
    for event in resumptions:
        if event["payload"].get("error_type") != "EXECUTOR_LOST":
            problems.append(f"a resumption not for EXECUTOR_LOST: {event['payload']}")
    return problems


@dataclass
class PointOutcome:
    audits: list[RunAudit]
    subscriptions: list[Subscription]
    recovery_seconds: float
    problems: dict[str, list[str]]
    logs: dict[str, list[dict[str, Any]]]


async def finish_and_check(
    ctx: Context,
    runs: Sequence[ChaosRun],
    resumed: Mapping[str, bool | None],
    reference: str | None,
    recovery_seconds: float,
    extra: Any = None,
) -> PointOutcome:
    """Wait for every run's subscribers, then audit and check every run. `extra(run, log,
    resumed)`: a kill point's own problems."""
    audits = await ctx.chaos.finish(resumable=True)
    logs = {run.workflow_id: await read_log(ctx.chaos.channel, run.workflow_id) for run in runs}
    problems = {}
    for run in runs:
        log, was_resumed = logs[run.workflow_id], resumed[run.workflow_id]
        found = run_problems(ctx.kit, ctx.stack, run, log, reference, was_resumed)
        if extra is not None:
            found += extra(run, log, was_resumed)
        problems[run.workflow_id] = found
    subscriptions = [s for run in runs for s in run.subscriptions]
    return PointOutcome(audits, subscriptions, recovery_seconds, problems, logs)
