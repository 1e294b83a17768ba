"""The audit's definitions of lost, duplicated and gap, on hand-made logs (no processes)."""

from __future__ import annotations

from typing import Any

from tests.chaos.harness import audit_run
from tests.chaos.subscriber import Subscription


def event(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": kind,
        "agent_id": "agent-main",
        "message": kind.lower(),
        "payload": payload,
        "timestamp": f"2026-01-01T00:00:{seq:02d}.000Z",
        "trace_id": "t",
    }


LOG = [
    event(1, "WORKFLOW_STARTED"),
    event(2, "TOOL_INVOKED", call_id="c1"),
    event(3, "TOOL_OBSERVATION", call_id="c1"),
    event(4, "THREAD_MESSAGE_DELTA", index=0),
    event(5, "THREAD_MESSAGE_COMPLETED"),
    event(6, "WORKFLOW_COMPLETED"),
    event(7, "STREAM_END"),
]


def subscriber(events: list[dict[str, Any]], ended: bool = True) -> Subscription:
    return Subscription("wf", events=events, ended=ended)


def test_a_subscriber_with_the_whole_log_is_clean() -> None:
    audit = audit_run("wf", 7, LOG, [subscriber(list(LOG))])
    assert (audit.lost, audit.duplicated, audit.gaps, audit.ephemeral_skipped) == (0, 0, 0, 0)
    assert audit.streams_ended == 1 and audit.problems == []


def test_a_missing_durable_event_is_lost_and_a_missing_token_is_skipped() -> None:
    partial = [e for e in LOG if e["seq"] not in (3, 4)]
    audit = audit_run("wf", 7, LOG, [subscriber(partial), subscriber(list(LOG))])
    assert (audit.lost, audit.ephemeral_skipped, audit.gaps) == (1, 1, 0)


def test_an_event_that_differs_from_the_log_counts_as_lost() -> None:
    changed = [dict(e) for e in LOG]
    changed[2] = {**changed[2], "payload": {"call_id": "c1", "result": "other"}}
    assert audit_run("wf", 7, LOG, [subscriber(changed)]).lost == 1


def test_a_seq_received_twice_and_a_repeated_batch_are_duplicates() -> None:
    twice = audit_run("wf", 7, LOG, [subscriber([*LOG[:3], LOG[2], *LOG[3:]])])
    assert (twice.duplicated, twice.gaps) == (1, 0)
    swapped = audit_run("wf", 7, LOG, [subscriber([LOG[0], LOG[2], LOG[1], *LOG[3:]])])
    assert (swapped.duplicated, swapped.gaps) == (0, 1)  # out of order

    resent = [*LOG[:3], {**LOG[1], "seq": 4}, {**LOG[2], "seq": 5}]
    resent += [{**e, "seq": e["seq"] + 2} for e in LOG[3:]]
    audit = audit_run("wf", 9, resent, [subscriber(resent)])
    assert audit.duplicated == 2
    assert any("repeats seq 2" in problem for problem in audit.problems)


def test_a_seq_nobody_holds_is_a_gap_and_a_stream_without_its_end_did_not_end() -> None:
    holed = [e for e in LOG if e["seq"] != 4]
    audit = audit_run("wf", 7, holed, [subscriber(holed[:-1], ended=False)])
    assert audit.gaps == 1
    assert audit.lost == 1  # STREAM_END never arrived
    assert audit.streams_ended == 0


def test_the_run_shape_is_checked() -> None:
    unanswered = [e for e in LOG if e["type"] != "TOOL_OBSERVATION"]
    problems = audit_run("wf", 7, unanswered, []).problems
    assert any("observed" in problem for problem in problems)
    cancelled = audit_run("wf", 7, LOG, [], terminal="WORKFLOW_CANCELLED").problems
    assert any("terminal" in problem for problem in cancelled)


def test_a_fatal_error_can_be_the_terminal_and_only_once() -> None:
    lost = event(6, "ERROR_OCCURRED", error_type="EXECUTOR_LOST", fatal=True)
    ended = [*LOG[:5], lost, LOG[6]]
    audit = audit_run("wf", 7, ended, [subscriber(list(ended))], terminal="ERROR_OCCURRED")
    assert (audit.lost, audit.duplicated, audit.gaps, audit.problems) == (0, 0, 0, [])
    assert any("terminal" in p for p in audit_run("wf", 7, ended, []).problems)

    twice = [*LOG[:5], lost, {**lost, "seq": 7}, {**LOG[6], "seq": 8}]
    audit = audit_run("wf", 8, twice, [subscriber(list(twice))], terminal="ERROR_OCCURRED")
    assert audit.duplicated == 1
    assert any("terminal" in p for p in audit.problems)


def test_a_recoverable_error_is_not_a_terminal() -> None:
    retried = event(5, "ERROR_OCCURRED", error_type="RATE_LIMIT", fatal=False)
    log = [*LOG[:4], retried, *({**e, "seq": e["seq"] + 1} for e in LOG[4:])]
    audit = audit_run("wf", 8, log, [subscriber(list(log))])
    assert (audit.lost, audit.duplicated, audit.gaps, audit.problems) == (0, 0, 0, [])


def taken_over(*after: dict[str, Any]) -> list[dict[str, Any]]:
    """A run whose owner died with call c2 invoked and the answer started, then `after`."""
    log = [
        event(1, "WORKFLOW_STARTED"),
        event(2, "AGENT_THINKING", iteration=1, status="start"),
        event(3, "TOOL_INVOKED", call_id="c2"),
        event(4, "THREAD_MESSAGE_DELTA", index=0),
        event(5, "ERROR_RECOVERY", error_type="EXECUTOR_LOST", recovery_action="resumed"),
        event(6, "AGENT_THINKING", iteration=1, status="start"),
        event(7, "TOOL_INVOKED", call_id="c2"),
        event(8, "TOOL_OBSERVATION", call_id="c2"),
        event(9, "THREAD_MESSAGE_DELTA", index=0),
        *after,
    ]
    tail = ["THREAD_MESSAGE_COMPLETED", "WORKFLOW_COMPLETED", "STREAM_END"]
    return log + [event(len(log) + 1 + i, kind) for i, kind in enumerate(tail)]


def test_a_new_owner_may_repeat_once_what_its_predecessor_left_unfinished() -> None:
    log = taken_over()
    last = len(log)
    resumed = audit_run("wf", last, log, [subscriber(list(log))], resumable=True)
    assert (resumed.duplicated, resumed.gaps, resumed.problems) == (0, 0, [])
    # Audited as one owner's log, the same repeats are duplicates.
    plain = audit_run("wf", last, log, [subscriber(list(log))])
    assert plain.duplicated == 3


def test_what_happens_once_per_run_stays_once_across_owners() -> None:
    twice = taken_over(event(10, "TOOL_OBSERVATION", call_id="c2"))
    audit = audit_run("wf", len(twice), twice, [], resumable=True)
    assert audit.duplicated == 1
    assert any("observed" in problem for problem in audit.problems)

    rethought = taken_over(event(10, "AGENT_THINKING", iteration=1, status="start"))
    assert audit_run("wf", len(rethought), rethought, [], resumable=True).duplicated == 1
