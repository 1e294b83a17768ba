"""The ReAct channel dialect's translator with any payloads the log accepts.

The events service checks a payload is a JSON object, not the types of its fields, and more
than one component appends to a log. A field of an unexpected type must not end a stream,
which a client would then resume into the same event again and again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.routes.react_channels import ReactChannelTranslator
from shuttle.envelope import EVENT_TYPE_NAMES
from shuttle.grpc_client import tenant_metadata
from shuttle.utf8 import json_text
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.fuzz.profiles import fewer, fuzz
from tests.gateway.conftest import AuthStack
from tests.support.sse import read_stream

TENANT_A = "acme"
"""The tenant of the stack's key_a."""

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["", "3", "1e999", "nan", "-inf", "x"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
# The fields the translator reads, and others.
fields = st.sampled_from(
    ["iteration", "iterations", "index", "duration_ms", "status", "delta", "content", "kind",
     "phase", "from", "fatal", "result", "tool_args", "original_messages"]
) | st.text(max_size=6)  # fmt: skip
events = st.lists(
    st.tuples(
        st.sampled_from(sorted(EVENT_TYPE_NAMES)),
        st.dictionaries(fields, values, max_size=6),
        st.sampled_from(["2026-01-01T00:00:00.000Z", "0001-01-01T00:00:00.000Z", ""]),
    ),
    max_size=8,
)


@fuzz
@given(events)
@example([("AGENT_COMPLETED", {"iterations": None}, "")])
@example([("TOOL_OBSERVATION", {"iteration": "", "duration_ms": "1e999"}, "")])
@example([("THREAD_MESSAGE_DELTA", {"index": [0]}, "")])
@example([("WORKFLOW_COMPLETED", {"duration_ms": 10**400}, "")])
def test_any_payload_becomes_frames_never_an_exception(
    events: list[tuple[str, dict[str, Any], str]],
) -> None:
    translator = ReactChannelTranslator()
    for seq, (kind, payload, timestamp) in enumerate(events, start=1):
        event = {
            "type": kind,
            "seq": seq,
            "timestamp": timestamp,
            "message": "",
            "payload": payload,
        }
        for channel, frame in translator.translate(event):
            assert channel in ("step", "answer", "compact", "phase", "inject", "done")
            json.dumps(frame, allow_nan=False)  # no NaN or Infinity, which JSON lacks
            json_text(frame).encode()  # what the stream writes


# -- through the real log and route -----------------------------------------------------------

# Types whose frames read numeric fields; each appended with generated payloads.
NUMERIC_READERS = ["AGENT_THINKING", "TOOL_OBSERVATION", "THREAD_MESSAGE_DELTA", "AGENT_COMPLETED"]


@pytest.fixture(scope="module")
def events_stub(auth_stack: AuthStack) -> Iterator[events_pb2_grpc.EventServiceStub]:
    with auth_stack.stack.blocking_channel("events") as channel:
        yield events_pb2_grpc.EventServiceStub(channel)


@pytest.mark.integration
@fewer(6)
@given(
    payloads=st.lists(
        st.tuples(st.sampled_from(NUMERIC_READERS), st.dictionaries(fields, values, max_size=4)),
        min_size=1,
        max_size=4,
    ),
    completed=st.dictionaries(st.sampled_from(["duration_ms", "result"]), values),
)
@example(
    payloads=[("TOOL_OBSERVATION", {"iteration": "", "duration_ms": None})],
    completed={"duration_ms": "x"},
)
# Past SQL's 64-bit column: the events service once failed the terminal event's Append.
@example(payloads=[("AGENT_COMPLETED", {"iterations": 1})], completed={"duration_ms": 2**64})
def test_odd_payloads_on_the_log_still_end_the_react_channel_stream_with_done(
    auth_stack: AuthStack,
    events_stub: events_pb2_grpc.EventServiceStub,
    payloads: list[tuple[str, dict[str, Any]]],
    completed: dict[str, Any],
) -> None:
    tenant = tenant_metadata(TENANT_A)
    workflow = events_stub.CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id=TENANT_A), metadata=tenant
    )
    drafts = [*(draft(kind, payload) for kind, payload in payloads)]
    drafts.append(draft("WORKFLOW_COMPLETED", completed))
    events_stub.Append(
        events_pb2.AppendRequest(
            workflow_id=workflow.workflow_id, tenant_id=TENANT_A, events=drafts
        ),
        metadata=tenant,
    )
    path = f"/api/v1/tasks/{workflow.workflow_id}/stream?dialect=react"
    status, frames = read_stream(
        auth_stack.url, path, headers={"Authorization": f"Bearer {auth_stack.key_a}"}
    )
    assert status == 200
    assert frames[-1].event == "done", [(f.event, f.data) for f in frames]
