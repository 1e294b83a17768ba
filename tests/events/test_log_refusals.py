"""EventLog refusals: invalid batches store nothing and take no seq, other tenants see nothing,
bad ids and arguments are named, a closed log takes no more."""

from __future__ import annotations

import json

import pytest

from services.events.errors import FailedPrecondition, InvalidArgument, NotFound
from services.events.log import EventLog
from services.events.payloads import STREAM_RESULT_LIMIT
from services.events.records import NewEvent

from .helpers import collect, new, progress
from .test_log import FINISH, make


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([], "events is empty"),
        (progress(1001), "batch has 1001 events; at most 1000"),
        ([new("PROGRESS", {"blob": "x" * (4 * 1024 * 1024)})], "at most 4194304 (4 MiB)"),
        ([new("PROGRESS"), NewEvent(type="")], "event 1: type EVENT_TYPE_UNSPECIFIED"),
        (
            [NewEvent(type="PROGRESS", payload_json="[1, 2]")],
            "event 0: payload_json must be a JSON object, not an array",
        ),
        (
            [NewEvent(type="PROGRESS", payload_json="{nope")],
            "event 0: payload_json is not valid JSON",
        ),
        (
            [NewEvent(type="PROGRESS", payload_json='{"x": NaN}')],
            "event 0: payload_json is not valid JSON",
        ),
        ([new("STREAM_END"), new("PROGRESS")], "event 1: nothing may follow STREAM_END"),
    ],
)
async def test_invalid_batches_store_nothing_and_consume_no_seq(
    event_log: EventLog, batch: list[NewEvent], message: str
) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", progress(1))
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        await event_log.append("wf-1", "t1", batch)
    assert await event_log.append("wf-1", "t1", progress(1)) == [2]


@pytest.mark.parametrize(
    "payload_json",
    [
        # Valid JSON that Python producers write (json.dumps of a surrogate-escaped file
        # name) and the fast parser refuses; the standard parser accepts it.
        '{"path": "caf\\udce9.txt"}',
        '{"huge": 1e999, "digits": 123456789012345678901234567890}',
        '{"plain": "caf\u00e9"}',
    ],
)
async def test_payloads_valid_as_json_are_stored_as_sent(
    event_log: EventLog, payload_json: str
) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", [NewEvent(type="PROGRESS", payload_json=payload_json)])
    page = await event_log.list_events("wf-1", "t1")
    assert [event.payload_json for event in page.events] == [payload_json]


async def test_a_cut_observation_holding_escaped_lone_surrogates_is_stored(
    event_log: EventLog,
) -> None:
    # Parsed to be cut, the escapes become characters that SQL cannot store as text.
    result = "caf\udce9 " + "x" * STREAM_RESULT_LIMIT
    payload_json = json.dumps({"tool_name": "read\ud800", "result": result})
    await make(event_log)
    await event_log.append("wf-1", "t1", [NewEvent("TOOL_OBSERVATION", payload_json=payload_json)])

    (streamed,) = (await event_log.list_events("wf-1", "t1")).events
    payload = json.loads(streamed.payload_json)
    assert payload["result"] == ("caf\ufffd " + "x" * STREAM_RESULT_LIMIT)[:STREAM_RESULT_LIMIT]
    assert payload["tool_name"] == "read\ud800" and payload["truncated"] is True
    (whole,) = (await event_log.list_events("wf-1", "t1", full_results=True)).events
    assert json.loads(whole.payload_json)["result"] == "caf\ufffd " + "x" * STREAM_RESULT_LIMIT


async def test_append_after_stream_end_fails_precondition(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", FINISH)
    with pytest.raises(FailedPrecondition, match="STREAM_END at seq 2"):
        await event_log.append("wf-1", "t1", progress(1))


async def test_other_tenant_gets_not_found_everywhere(event_log: EventLog) -> None:
    await make(event_log)
    await event_log.append("wf-1", "t1", progress(1))
    with pytest.raises(NotFound):
        await event_log.get_workflow("wf-1", "t2")
    with pytest.raises(NotFound):
        await event_log.append("wf-1", "t2", progress(1))
    with pytest.raises(NotFound):
        await event_log.list_events("wf-1", "t2")
    with pytest.raises(NotFound):
        await collect(event_log.stream("wf-1", "t2"))


@pytest.mark.parametrize(
    ("limit", "types", "message"),
    [
        (1001, None, "limit must be at most 1000"),
        (0, ["NOT_A_TYPE"], "types\\[0\\]: NOT_A_TYPE is not an event type"),
    ],
)
async def test_bad_list_arguments(
    event_log: EventLog, limit: int, types: list[str] | None, message: str
) -> None:
    await make(event_log)
    with pytest.raises(InvalidArgument, match=message):
        await event_log.list_events("wf-1", "t1", limit=limit, types=types)


@pytest.mark.parametrize("workflow_id", ["", "has space", "x" * 129, "-leading-dash"])
async def test_bad_ids_are_invalid_arguments(event_log: EventLog, workflow_id: str) -> None:
    with pytest.raises(InvalidArgument, match="workflow_id"):
        await event_log.create_workflow(tenant_id="t1", workflow_id=workflow_id or " ")
    with pytest.raises(InvalidArgument, match="workflow_id"):
        await event_log.get_workflow(workflow_id, "t1")


async def test_session_ids_are_free_form_but_bounded(event_log: EventLog) -> None:
    record = await event_log.create_workflow(tenant_id="t1", session_id="my chat #1")
    assert record.session_id == "my chat #1"
    with pytest.raises(InvalidArgument, match="session_id is 129 characters; at most 128"):
        await event_log.create_workflow(tenant_id="t1", session_id="s" * 129)


async def test_missing_tenant_is_an_invalid_argument(event_log: EventLog) -> None:
    with pytest.raises(InvalidArgument, match="tenant_id is required"):
        await event_log.create_workflow(tenant_id="")
