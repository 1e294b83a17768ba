"""shuttle.client against a running gateway with authentication: typed events to STREAM_END,
a dropped stream resumed without a loss or a repeat, tasks, control, approvals, and the
refusals a caller must be able to tell apart."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from shuttle.client import Event, ShuttleClient, ShuttleError
from shuttle.v1 import tools_pb2, tools_pb2_grpc
from tests.gateway.conftest import AuthStack
from tests.support.cutting_proxy import CuttingProxy
from tests.support.stack import Stack, free_ports

pytestmark = pytest.mark.integration


def no_wait(_: float) -> None:
    return None


@pytest.fixture
def client_a(auth_stack: AuthStack) -> Iterator[ShuttleClient]:
    with ShuttleClient(auth_stack.url, auth_stack.key_a) as shuttle:
        yield shuttle


def assert_whole_log(events: list[Event]) -> None:
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert events[0].type == "WORKFLOW_STARTED"
    assert [event.type for event in events[-2:]] == ["WORKFLOW_COMPLETED", "STREAM_END"]


def test_a_task_is_followed_as_typed_events_to_its_end(client_a: ShuttleClient) -> None:
    workflow_id = client_a.start_task("What is 6*7?")
    events = list(client_a.events(workflow_id))
    assert_whole_log(events)
    [invoked] = [event for event in events if event.type == "TOOL_INVOKED"]
    assert invoked.payload["tool_name"] == "calculator" and invoked.timestamp is not None
    assert {event.workflow_id for event in events} == {workflow_id}

    task = client_a.get_task(workflow_id)
    assert task.finished and task.status == "completed"
    assert task.result == "[demo model] 6*7 = 42"
    assert task.last_seq == events[-1].seq and task.usage.total_tokens > 0
    assert workflow_id in [summary.workflow_id for summary in client_a.list_tasks()]
    # The same log, read after the fact, and from a seq.
    assert [(e.seq, e.type) for e in client_a.history(workflow_id)] == [
        (e.seq, e.type) for e in events
    ]
    later = list(client_a.events(workflow_id, after_seq=5))
    assert [event.seq for event in later] == [event.seq for event in events[5:]]


def test_a_dropped_stream_resumes_after_the_last_seq_read(auth_stack: AuthStack) -> None:
    port = int(auth_stack.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, frames_before_cut=3).start()
    lost: list[tuple[str, int]] = []
    try:
        with ShuttleClient(
            f"http://127.0.0.1:{proxy.port}",
            auth_stack.key_a,
            on_reconnect=lambda reason, seq: lost.append((reason, seq)),
            sleep=no_wait,
        ) as shuttle:
            workflow_id = shuttle.start_task("What is 9*9?")
            events = list(shuttle.events(workflow_id))
            frames = list(shuttle.frames(workflow_id))
    finally:
        proxy.stop()
    assert proxy.cuts == 1 and len(lost) == 1
    assert lost[0][1] == 3  # resumed after the third event read
    assert_whole_log(events)  # nothing lost, nothing repeated
    # The channel dialect from the start ends with its `done` frame.
    assert frames[-1].channel == "done" and "answer" in [frame.channel for frame in frames]


def test_another_tenants_task_is_not_found(auth_stack: AuthStack, finished_a: str) -> None:
    with ShuttleClient(auth_stack.url, auth_stack.key_b) as other:
        with pytest.raises(ShuttleError) as caught:
            other.get_task(finished_a)
        assert caught.value.status == 404
        with pytest.raises(ShuttleError) as streamed:
            list(other.events(finished_a))
        assert streamed.value.status == 404


def test_bad_input_and_a_missing_credential_are_refused_by_name(
    auth_stack: AuthStack, client_a: ShuttleClient
) -> None:
    with pytest.raises(ShuttleError) as blank:
        client_a.start_task("   ")
    assert blank.value.status == 400 and "query" in blank.value.message
    with ShuttleClient(auth_stack.url) as anonymous, pytest.raises(ShuttleError) as refused:
        anonymous.start_task("What is 1+1?")
    assert refused.value.status == 401
    with pytest.raises(ShuttleError) as unknown:
        client_a.decide_approval("ap-missing", approve=True)
    assert unknown.value.status == 404 and "ap-missing" in unknown.value.message


def test_an_unreachable_gateway_is_said_so() -> None:
    [port] = free_ports(1)
    with ShuttleClient(f"http://127.0.0.1:{port}") as nowhere:
        with pytest.raises(ShuttleError) as caught:
            nowhere.get_task("wf-x")
        assert caught.value.status == 0 and "cannot reach the gateway" in str(caught.value)
    gave_up: list[int] = []
    with (
        ShuttleClient(
            f"http://127.0.0.1:{port}",
            reconnect_attempts=2,
            on_reconnect=lambda _, seq: gave_up.append(seq),
            sleep=no_wait,
        ) as nowhere,
        pytest.raises(ShuttleError) as lost,
    ):
        list(nowhere.events("wf-x"))
    assert "lost the stream" in str(lost.value) and gave_up == [0, 0]


def test_control_of_a_finished_run_is_refused_with_its_reason(
    client_a: ShuttleClient, finished_a: str
) -> None:
    with pytest.raises(ShuttleError) as caught:
        client_a.pause(finished_a)
    assert caught.value.status == 409 and "completed" in caught.value.message


def test_an_approval_is_decided_while_the_events_are_followed(
    gated: tuple[Stack, str, str],
) -> None:
    stack, key_a, _ = gated
    decided: list[str] = []
    with ShuttleClient(stack.gateway, key_a) as shuttle:
        workflow_id = shuttle.start_task("What is 5*5?")
        for event in shuttle.events(workflow_id):
            if event.type == "APPROVAL_REQUESTED":
                approval_id = event.payload["approval_id"]
                # From another thread, as a reviewer elsewhere would.
                worker = threading.Thread(
                    target=lambda ap=approval_id: decided.append(shuttle.decide_approval(ap, True))
                )
                worker.start()
                worker.join(30)
        task = shuttle.get_task(workflow_id)
    assert decided == ["approved"]
    assert task.status == "completed" and "25" in task.result


def test_a_run_waiting_on_an_approval_is_interrupted_and_cancelled(
    gated: tuple[Stack, str, str],
) -> None:
    stack, key_a, _ = gated
    with ShuttleClient(stack.gateway, key_a) as shuttle:
        workflow_id = shuttle.start_task("What is 3*3?")
        events = shuttle.events(workflow_id)
        for event in events:
            if event.type == "APPROVAL_REQUESTED":
                break
        assert shuttle.interrupt(workflow_id, "answer in French")
        shuttle.cancel(workflow_id, "not needed")
        rest = [event.type for event in events]
        task = shuttle.get_task(workflow_id)
    assert rest[-2:] == ["WORKFLOW_CANCELLED", "STREAM_END"]
    assert task.status == "cancelled"
    # The call waiting on the approval is closed with the run: a late approval runs nothing.
    approval = asyncio.run(settled_approval(stack, workflow_id))
    assert approval.status == "run_ended" and approval.decided_by == "system"
    with ShuttleClient(stack.gateway, key_a) as shuttle, pytest.raises(ShuttleError) as late:
        shuttle.decide_approval(approval.approval_id, approve=True)
    assert late.value.status == 409 and "run_ended" in late.value.message


async def settled_approval(stack: Stack, workflow_id: str) -> tools_pb2.Approval:
    """The run's one approval, once it is no longer pending (the tools service closes it as
    soon as it reads the end of the run's log)."""
    async with stack.channel("tools") as channel:
        tools = tools_pb2_grpc.ToolServiceStub(channel)
        request = tools_pb2.ListApprovalsRequest(tenant_id="acme", workflow_id=workflow_id)
        async with asyncio.timeout(30):
            while True:
                [approval] = (await tools.ListApprovals(request)).approvals
                if approval.status != "pending":
                    return approval
                await asyncio.sleep(0.05)
