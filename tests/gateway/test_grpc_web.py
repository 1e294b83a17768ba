"""grpc-web: binary and text framing over HTTP, errors, deadlines, CORS, cancellation, and
connect-web in headless Chromium."""

from __future__ import annotations

import base64
import struct
import time
from pathlib import Path

import httpx
import pytest

from gateway.edge.grpc_web_framing import decode_text, parse_frames
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc, executor_pb2, tools_pb2
from tests.gateway.conftest import AuthStack, drive
from tests.support.gateway_server import GatewayServer

pytestmark = pytest.mark.integration


def frame(message: bytes, flag: int = 0) -> bytes:
    return struct.pack(">BI", flag, len(message)) + message


def call(
    base: str,
    path: str,
    message: bytes,
    key: str | None,
    text: bool = False,
    headers: dict[str, str] | None = None,
) -> tuple[httpx.Response, list[bytes], dict[str, str]]:
    """POST one grpc-web request (with no key when `key` is None); the reply's messages and
    its trailers."""
    body = frame(message)
    kind = "application/grpc-web-text" if text else "application/grpc-web+proto"
    credentials = {"authorization": f"Bearer {key}"} if key is not None else {}
    response = httpx.post(
        f"{base}{path}",
        content=base64.b64encode(body) if text else body,
        headers={"content-type": kind, "x-grpc-web": "1", **credentials, **(headers or {})},
        timeout=60,
    )
    raw = decode_text(response.content) if text else response.content
    messages, trailers = [], dict(response.headers)
    for flag, payload in parse_frames(raw):
        if flag & 0x80:
            for line in payload.decode().split("\r\n"):
                if line:
                    name, _, value = line.partition(":")
                    trailers[name] = value
        else:
            messages.append(payload)
    return response, messages, trailers


def held_open(auth_stack: AuthStack, tenant: str = "acme") -> str:
    """A workflow no run appends to, so its Stream tails live and never ends by itself.
    Made on the events service directly, as the executor makes one: grpc-web cannot."""
    with auth_stack.stack.blocking_channel("events") as channel:
        created = events_pb2_grpc.EventServiceStub(channel).CreateWorkflow(
            events_pb2.CreateWorkflowRequest(query="held open"), metadata=tenant_metadata(tenant)
        )
    return str(created.workflow_id)


def test_unary_call_in_binary_and_text_mode(auth_stack: AuthStack) -> None:
    request = tools_pb2.ListToolsRequest().SerializeToString()
    for text in (False, True):
        response, messages, trailers = call(
            auth_stack.url, "/shuttle.v1.ToolService/ListTools", request, auth_stack.key_a, text
        )
        assert response.status_code == 200
        expected = "application/grpc-web-text+proto" if text else "application/grpc-web+proto"
        assert response.headers["content-type"] == expected
        reply = tools_pb2.ListToolsResponse.FromString(messages[0])
        assert "calculator" in [t.name for t in reply.tools]
        assert trailers["grpc-status"] == "0"
    # Text mode encodes every frame on its own: the body is two padded base64 segments.
    response, _, _ = call(
        auth_stack.url, "/shuttle.v1.ToolService/ListTools", request, auth_stack.key_a, True
    )
    assert response.content.count(b"=") >= 1 and not response.content.endswith(b"\n")


def test_server_streaming_with_the_callers_tenant_forced(auth_stack: AuthStack) -> None:
    start = executor_pb2.StartRunRequest(query="What is 5*5?", tenant_id="globex")
    _, [started], trailers = call(
        auth_stack.url,
        "/shuttle.v1.ExecutorService/StartRun",
        start.SerializeToString(),
        auth_stack.key_a,
    )
    workflow_id = executor_pb2.StartRunResponse.FromString(started).workflow_id
    stream = events_pb2.StreamRequest(workflow_id=workflow_id, from_seq=1).SerializeToString()
    for text in (False, True):
        _, messages, trailers = call(
            auth_stack.url, "/shuttle.v1.EventService/Stream", stream, auth_stack.key_a, text
        )
        events = [common_pb2.Event.FromString(m) for m in messages]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[-1].type == common_pb2.EVENT_TYPE_STREAM_END
        assert trailers["grpc-status"] == "0"
    # The request named tenant globex; the key is acme's, so the workflow is acme's.
    _, _, refused = call(
        auth_stack.url, "/shuttle.v1.EventService/Stream", stream, auth_stack.key_b
    )
    assert refused["grpc-status"] == "5"


def test_errors_deadlines_and_refusals(auth_stack: AuthStack) -> None:
    url, key = auth_stack.url, auth_stack.key_a
    missing = events_pb2.GetWorkflowRequest(workflow_id="wf-missing").SerializeToString()
    _, messages, trailers = call(url, "/shuttle.v1.EventService/GetWorkflow", missing, key)
    assert messages == [] and trailers["grpc-status"] == "5"
    assert "wf-missing" in trailers["grpc-message"]
    # grpc-message is percent-encoded, as the gRPC spec has it.
    accented = events_pb2.GetWorkflowRequest(workflow_id="wf-née").SerializeToString()
    _, _, trailers = call(url, "/shuttle.v1.EventService/GetWorkflow", accented, key)
    assert "%C3%A9" in trailers["grpc-message"]

    _, _, invalid = call(url, "/shuttle.v1.ExecutorService/StartRun", b"", key)
    assert invalid["grpc-status"] == "3" and "query" in invalid["grpc-message"]

    # A log no run appends to stays open, so the stream outlasts its deadline. (With a 1 ns
    # deadline on a missing workflow, NOT_FOUND sometimes came back first.)
    stream = events_pb2.StreamRequest(workflow_id=held_open(auth_stack)).SerializeToString()
    _, _, late = call(
        url, "/shuttle.v1.EventService/Stream", stream, key, headers={"grpc-timeout": "200m"}
    )
    assert late["grpc-status"] == "4"
    _, _, bad_timeout = call(
        url, "/shuttle.v1.EventService/Stream", stream, key, headers={"grpc-timeout": "soon"}
    )
    assert bad_timeout["grpc-status"] == "3"

    _, _, unknown = call(url, "/shuttle.v1.EventService/Nope", b"", key)
    assert unknown["grpc-status"] == "12"
    response, _, anonymous = call(url, "/shuttle.v1.ToolService/ListTools", b"", "sk-shuttle-bad")
    assert response.status_code == 200 and anonymous["grpc-status"] == "16"
    _, _, garbage = call(url, "/shuttle.v1.EventService/GetWorkflow", b"\xff\xff\xff", key)
    assert garbage["grpc-status"] == "3"
    truncated = httpx.post(
        f"{url}/shuttle.v1.ToolService/ListTools",
        content=b"\x00\x00\x00\x00\x09abc",
        headers={"content-type": "application/grpc-web+proto", "authorization": f"Bearer {key}"},
    )
    assert truncated.headers["grpc-status"] == "3"
    wrong_type = httpx.post(f"{url}/shuttle.v1.ToolService/ListTools", content=b"{}")
    assert wrong_type.status_code == 415


def test_cors_preflight(auth_stack: AuthStack) -> None:
    preflight = httpx.options(
        f"{auth_stack.url}/shuttle.v1.EventService/Stream",
        headers={
            "Origin": "http://127.0.0.1:9999",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-grpc-web,authorization,grpc-timeout",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] in ("*", "http://127.0.0.1:9999")
    allowed = preflight.headers["access-control-allow-headers"].lower()
    for header in ("x-grpc-web", "grpc-timeout", "authorization", "content-type"):
        assert header in allowed
    response, _, _ = call(
        auth_stack.url,
        "/shuttle.v1.ToolService/ListTools",
        b"",
        auth_stack.key_a,
        headers={"Origin": "http://127.0.0.1:9999"},
    )
    assert "grpc-status" in response.headers["access-control-expose-headers"]


def test_a_disconnected_client_cancels_the_upstream_call(
    auth_stack: AuthStack, gateway_server: GatewayServer
) -> None:
    proxy = gateway_server.app.state.grpc_web
    key = auth_stack.key_a
    body = frame(events_pb2.StreamRequest(workflow_id=held_open(auth_stack)).SerializeToString())
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST",
            f"{gateway_server.url}/shuttle.v1.EventService/Stream",
            content=body,
            headers={
                "content-type": "application/grpc-web+proto",
                "authorization": f"Bearer {key}",
            },
        ) as response,
    ):
        assert response.status_code == 200
        deadline = time.monotonic() + 20
        while proxy.active_calls != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proxy.active_calls == 1
    deadline = time.monotonic() + 20
    while proxy.active_calls and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.active_calls == 0


def test_connect_web_in_chromium(auth_stack: AuthStack, browser_clients: Path) -> None:
    result = drive("grpc-web", auth_stack.url, auth_stack.key_a)
    for codec in ("binary", "json"):
        run = result[codec]
        assert run["types"][0] == "WORKFLOW_STARTED" and run["types"][-1] == "STREAM_END"
        assert run["seqs"] == list(range(1, len(run["seqs"]) + 1))
        assert run["answer"] == "[demo model] 12*7 = 84"
        assert run["tenant"] == "acme"  # the page asked for another tenant; the key decides
        assert run["missing"]["code"] == "NotFound"
        assert "calculator" in run["tools"]
        assert run["startError"]["code"] == "InvalidArgument"
        assert run["streamError"]["code"] == "NotFound"
        # What only Shuttle's components may call is refused, naming the method.
        assert run["route"]["code"] == "PermissionDenied"
        assert "shuttle.v1.PlannerService/Route" in run["route"]["message"]
        assert run["append"]["code"] == "PermissionDenied"
        assert run["statusAfterAppend"] == common_pb2.WORKFLOW_STATUS_COMPLETED
        assert run["resultAfterAppend"] != "forged"
