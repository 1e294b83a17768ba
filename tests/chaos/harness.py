"""What "no event lost, none duplicated" means, checked the same way for every fault.

For one run, with last_seq taken from the workflow's registry row and the durable log read
page by page with EventService.List:

- lost: for each subscriber, every durable event (a List event whose type is not ephemeral)
  it did not receive, plus every received event that differs from List's event of that seq
  (type, agent, message, payload, timestamp, trace); summed over subscribers.
- duplicated: every seq a subscriber received more than once, plus every durable event that
  repeats an earlier one's identity (the same workflow start, terminal, STREAM_END or answer;
  the same agent start or end; the same tool call id invoked or observed twice; the same
  thinking iteration and status; the same answer-token index) — what a retried batch stored
  twice would look like.
- gaps: seqs in 1..last_seq that neither the log nor any subscriber holds, plus every place a
  subscriber received seqs out of order.
- ephemeral skipped: token events (THREAD_MESSAGE_DELTA, LLM_PARTIAL, LLM_PROMPT) a subscriber
  missed although they exist; only the hot tier holds those, and their content is repeated by
  a durable event.
- a stream ended when its subscriber received STREAM_END, as the last event, at last_seq.

The run's shape is checked too: one WORKFLOW_STARTED, one terminal event (WORKFLOW_COMPLETED,
WORKFLOW_CANCELLED, or a fatal ERROR_OCCURRED for a run the fault ended), STREAM_END last,
each TOOL_INVOKED followed by exactly one TOOL_OBSERVATION of the same call id.

A run another executor took over (`resumable`) is audited per owner: its log is cut at each
ERROR_RECOVERY{recovery_action: "resumed"}, and within each part the rules above hold; across
parts the new owner may start its agents again, think again about an iteration whose model
call was lost, invoke again a call left without its observation (the tools service's ledger
answers it) and stream an answer again from index 0. What happens once per run stays once
per run: the start, the terminal, STREAM_END, the whole answer, each call's observation, each
agent's completion.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx

from shuttle.envelope import EPHEMERAL_TYPES, TERMINAL_TYPES, to_json_dict
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.chaos.subscriber import Subscription

RESULTS_DIR = Path(__file__).resolve().parents[2] / "var" / "chaos"
TENANT = "default"
ONCE_PER_RUN = frozenset(
    {"WORKFLOW_STARTED", *TERMINAL_TYPES, "STREAM_END", "THREAD_MESSAGE_COMPLETED"}
)
COMPARED_FIELDS = ("type", "agent_id", "message", "payload", "timestamp", "trace_id")
PER_OWNER_TYPES = frozenset(
    {"AGENT_STARTED", "AGENT_THINKING", "TOOL_INVOKED", "THREAD_MESSAGE_DELTA"}
)
"""Identities a new owner may repeat once (see the module docstring)."""


@dataclass
class RunAudit:
    workflow_id: str
    last_seq: int
    subscribers: int
    lost: int = 0
    duplicated: int = 0
    gaps: int = 0
    ephemeral_skipped: int = 0
    streams_ended: int = 0
    problems: list[str] = field(default_factory=list)


def is_terminal(event: dict[str, Any]) -> bool:
    """The event that ends a run: completed, cancelled, or a fatal error."""
    if event["type"] == "ERROR_OCCURRED":
        return bool(event["payload"].get("fatal"))
    return event["type"] in TERMINAL_TYPES


def is_resumption(event: dict[str, Any]) -> bool:
    """A new owner's first word on a run it took over."""
    action = event["payload"].get("recovery_action")
    return bool(event["type"] == "ERROR_RECOVERY" and action == "resumed")


def identity(event: dict[str, Any]) -> tuple[Any, ...] | None:
    """What makes this event unique in its run, or None for types that may repeat."""
    kind, agent, payload = event["type"], event["agent_id"], event["payload"]
    if kind in ONCE_PER_RUN or is_terminal(event):
        return (kind,)
    if kind in ("AGENT_STARTED", "AGENT_COMPLETED"):
        return (kind, agent)
    if kind in ("TOOL_INVOKED", "TOOL_OBSERVATION"):
        return (kind, agent, payload.get("call_id"))
    if kind == "AGENT_THINKING":
        return (kind, agent, payload.get("iteration"), payload.get("status"))
    if kind == "THREAD_MESSAGE_DELTA":
        return (kind, agent, payload.get("index"))
    return None


def audit_run(
    workflow_id: str,
    last_seq: int,
    log: Sequence[dict[str, Any]],
    subscriptions: Sequence[Subscription],
    terminal: str = "WORKFLOW_COMPLETED",
    resumable: bool = False,
) -> RunAudit:
    """Check one run's log and every subscriber's copy of it (see the module docstring);
    `resumable`: per owner, for a run that may have been taken over."""
    result = RunAudit(workflow_id, last_seq, len(subscriptions))
    by_seq = {int(event["seq"]): event for event in log}
    durable = {seq for seq, event in by_seq.items() if event["type"] not in EPHEMERAL_TYPES}
    seen_anywhere = set(by_seq)
    log_seqs = [int(event["seq"]) for event in log]
    result.duplicated += len(log_seqs) - len(set(log_seqs))
    result.gaps += sum(1 for a, b in itertools.pairwise(log_seqs) if b <= a)
    result.duplicated += _repeated_identities(log, result.problems, resumable)
    for sub in subscriptions:
        counts = Counter(sub.seqs)
        result.duplicated += sum(n - 1 for n in counts.values())
        result.gaps += sum(1 for a, b in zip(sub.seqs, sub.seqs[1:], strict=False) if b < a)
        received = {int(event["seq"]): event for event in sub.events}
        seen_anywhere |= set(received)
        result.lost += len(durable - set(received))
        for seq, event in received.items():
            expected = by_seq.get(seq)
            if expected is not None and _differs(event, expected):
                result.lost += 1
                result.problems.append(f"seq {seq} differs from the log: {event} != {expected}")
        ended = sub.ended and sub.events[-1]["type"] == "STREAM_END" and sub.last_seq == last_seq
        result.streams_ended += ended
    result.gaps += len(set(range(1, last_seq + 1)) - seen_anywhere)
    for sub in subscriptions:
        missed = seen_anywhere - set(sub.seqs) - durable
        result.ephemeral_skipped += len(missed)
    result.problems += _shape_problems(log, last_seq, terminal, resumable)
    return result


def _differs(received: dict[str, Any], expected: dict[str, Any]) -> bool:
    return any(received.get(name) != expected.get(name) for name in COMPARED_FIELDS)


def _repeated_identities(
    log: Iterable[dict[str, Any]], problems: list[str], resumable: bool = False
) -> int:
    seen: dict[tuple[Any, ...], int] = {}
    repeats = 0
    owner = 0
    for event in log:
        if resumable and is_resumption(event):
            owner += 1
        key = identity(event)
        if key is None:
            continue
        if resumable and event["type"] in PER_OWNER_TYPES:
            key = (*key, "owner", owner)
        if key in seen:
            repeats += 1
            problems.append(f"seq {event['seq']} repeats seq {seen[key]}: {key}")
        else:
            seen[key] = int(event["seq"])
    return repeats


def _shape_problems(
    log: Sequence[dict[str, Any]], last_seq: int, terminal: str, resumable: bool = False
) -> list[str]:
    types = [event["type"] for event in log]
    problems = []
    if types.count("WORKFLOW_STARTED") != 1:
        problems.append(f"{types.count('WORKFLOW_STARTED')} WORKFLOW_STARTED events")
    terminals = [event["type"] for event in log if is_terminal(event)]
    if terminals != [terminal]:
        problems.append(f"terminal events {terminals}, expected [{terminal}]")
    if not log or types[-1] != "STREAM_END" or int(log[-1]["seq"]) != last_seq:
        problems.append("STREAM_END is not the last event at last_seq")
    invoked = [e["payload"].get("call_id") for e in log if e["type"] == "TOOL_INVOKED"]
    observed = [e["payload"].get("call_id") for e in log if e["type"] == "TOOL_OBSERVATION"]
    if resumable:
        # Invoked again by a new owner is fine; observed is still once per call (identities).
        invoked = sorted(set(invoked))
    if sorted(invoked) != sorted(observed):
        problems.append(f"tool calls invoked {invoked} but observed {observed}")
    for call_id in invoked:
        invoked_at = next(i for i, e in enumerate(log) if e["payload"].get("call_id") == call_id)
        if types[invoked_at] != "TOOL_INVOKED":
            problems.append(f"tool call {call_id} observed before it was invoked")
    return problems


async def read_log(channel: grpc.aio.Channel, workflow_id: str) -> list[dict[str, Any]]:
    """The whole log as EventService.List pages it, as JSON envelopes."""
    stub = events_pb2_grpc.EventServiceStub(channel)
    events: list[dict[str, Any]] = []
    from_seq = 1
    while True:
        page = await stub.List(
            events_pb2.ListRequest(
                workflow_id=workflow_id, tenant_id=TENANT, from_seq=from_seq, limit=1000
            ),
            timeout=30,
        )
        events += [to_json_dict(event) for event in page.events]
        if not page.next_seq:
            return events
        from_seq = page.next_seq


async def last_seq(channel: grpc.aio.Channel, workflow_id: str) -> int:
    stub = events_pb2_grpc.EventServiceStub(channel)
    reply = await stub.GetWorkflow(
        events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id=TENANT), timeout=10
    )
    return int(reply.last_seq)


async def submit(client: httpx.AsyncClient, query: str) -> str:
    response = await client.post("/api/v1/tasks", json={"query": query})
    assert response.status_code == 201, response.text
    workflow_id: str = response.json()["workflow_id"]
    return workflow_id


async def wait_until(
    condition: Callable[[], Awaitable[bool]],
    what: str,
    timeout_seconds: float = 90.0,
    interval: float = 0.05,
) -> float:
    """Poll an async `condition` until it is true; the seconds it took. Failures of the
    condition itself (a service still down) count as not yet."""
    started = time.monotonic()
    while True:
        try:
            if await condition():
                return time.monotonic() - started
        except (grpc.aio.AioRpcError, httpx.HTTPError):
            pass
        if time.monotonic() - started > timeout_seconds:
            raise AssertionError(f"gave up after {timeout_seconds:.0f}s waiting until {what}")
        await asyncio.sleep(interval)


async def wait_for_progress(
    subscriptions: Sequence[Subscription], past: dict[str, int], what: str
) -> float:
    """Seconds until every subscriber has received an event beyond `past[its workflow]`
    (or its stream has ended): the system delivers again after a fault."""

    async def everyone_moved_on() -> bool:
        return all(sub.ended or sub.last_seq > past[sub.workflow_id] for sub in subscriptions)

    return await wait_until(everyone_moved_on, what)


@dataclass
class FaultRow:
    """One line of the reliability table, written to var/chaos/<key>.json."""

    key: str
    fault: str
    scale: str
    runs: int
    subscribers: int
    events: int
    delivered: int
    lost: int
    duplicated: int
    gaps: int
    ephemeral_skipped: int
    streams_ended: int
    recovery_seconds: float | None
    recovery_measure: str
    recorded_at: str = field(
        default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds")
    )


def record_row(
    key: str,
    fault: str,
    scale: str,
    audits: Sequence[RunAudit],
    subscriptions: Sequence[Subscription],
    recovery_seconds: float | None,
    recovery_measure: str,
) -> FaultRow:
    row = FaultRow(
        key=key,
        fault=fault,
        scale=scale,
        runs=len(audits),
        subscribers=len(subscriptions),
        events=sum(a.last_seq for a in audits),
        delivered=sum(len(s.events) for s in subscriptions),
        lost=sum(a.lost for a in audits),
        duplicated=sum(a.duplicated for a in audits),
        gaps=sum(a.gaps for a in audits),
        ephemeral_skipped=sum(a.ephemeral_skipped for a in audits),
        streams_ended=sum(a.streams_ended for a in audits),
        recovery_seconds=None if recovery_seconds is None else round(recovery_seconds, 3),
        recovery_measure=recovery_measure,
    )
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"{key}.json").write_text(json.dumps(asdict(row), indent=2) + "\n")
    return row


def assert_clean(audits: Sequence[RunAudit], allow_ephemeral_skips: bool = False) -> None:
    """Every run: nothing lost, duplicated or missing, every stream ended, a sound shape."""
    for audit in audits:
        summary = f"{audit.workflow_id}: {audit}"
        assert audit.problems == [], summary
        assert (audit.lost, audit.duplicated, audit.gaps) == (0, 0, 0), summary
        assert audit.streams_ended == audit.subscribers, summary
        if not allow_ephemeral_skips:
            assert audit.ephemeral_skipped == 0, summary
