"""The gateway reads at most SHUTTLE_GATEWAY_MAX_BODY_BYTES of a request body, and says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import unquote

import httpx
import pytest

from shuttle.v1 import executor_pb2
from tests.gateway.conftest import AuthStack
from tests.gateway.test_grpc_web import call, frame
from tests.support.gateway_server import GatewayServer

pytestmark = pytest.mark.integration

LIMIT = 64 * 1024
SMALL_LIMIT = [{"gateway_max_body_bytes": LIMIT}]


def _chunked(body: bytes) -> Iterator[bytes]:
    """The body in pieces, so that httpx sends it without a Content-Length."""
    for start in range(0, len(body), 8 * 1024):
        yield body[start : start + 8 * 1024]


def _assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "request_too_large"
    assert "65,536 bytes" in error["message"]
    assert "SHUTTLE_GATEWAY_MAX_BODY_BYTES" in error["message"]


@pytest.mark.parametrize("gateway_server", SMALL_LIMIT, indirect=True)
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_refused_naming_the_limit(
    gateway_server: GatewayServer, auth_stack: AuthStack, declared: bool
) -> None:
    headers = {"Authorization": f"Bearer {auth_stack.key_a}", "Content-Type": "application/json"}
    # Each body is valid and within its route's own limits; only its size is wrong.
    task = json.dumps({"query": "q" * 70_000}).encode()
    chat = json.dumps(
        {"model": "shuttle-auto", "messages": [{"role": "user", "content": "c" * 70_000}]}
    ).encode()
    with httpx.Client(base_url=gateway_server.url, headers=headers, timeout=60) as client:
        for path, body in (("/api/v1/tasks", task), ("/v1/chat/completions", chat)):
            content = body if declared else _chunked(body)
            _assert_refused(client.post(path, content=content))
        listed = client.get("/api/v1/tasks", params={"limit": 100}).json()["tasks"]
        queries = {task["query"] for task in listed}
        assert "q" * 70_000 not in queries and "c" * 70_000 not in queries  # nothing started
        within = json.dumps({"query": "q" * 60_000}).encode()
        accepted = client.post("/api/v1/tasks", content=within if declared else _chunked(within))
        assert accepted.status_code == 201, accepted.text


@pytest.mark.parametrize("gateway_server", SMALL_LIMIT, indirect=True)
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_grpc_web_calls_are_held_to_the_same_limit(
    gateway_server: GatewayServer, auth_stack: AuthStack, declared: bool
) -> None:
    # One frame whose header announces no more than the limit, but whose body passes it.
    query = "g" * (LIMIT - 6)
    request = executor_pb2.StartRunRequest(query=query).SerializeToString()
    body = frame(request)
    assert len(request) <= LIMIT < len(body)
    response = httpx.post(
        f"{gateway_server.url}/shuttle.v1.ExecutorService/StartRun",
        content=body if declared else _chunked(body),
        headers={
            "Authorization": f"Bearer {auth_stack.key_a}",
            "Content-Type": "application/grpc-web+proto",
        },
        timeout=60,
    )
    assert response.status_code == 200
    assert response.headers["grpc-status"] == "8", response.headers  # RESOURCE_EXHAUSTED
    message = unquote(response.headers["grpc-message"])
    assert "65,536 bytes" in message and "SHUTTLE_GATEWAY_MAX_BODY_BYTES" in message
    with auth_stack.client(auth_stack.key_a) as client:
        listed = client.get("/api/v1/tasks", params={"limit": 100}).json()["tasks"]
    assert query not in {task["query"] for task in listed}  # nothing started
    within = executor_pb2.StartRunRequest(query="g" * (LIMIT // 2)).SerializeToString()
    _, messages, trailers = call(
        gateway_server.url, "/shuttle.v1.ExecutorService/StartRun", within, auth_stack.key_a
    )
    assert trailers["grpc-status"] == "0", trailers
    assert executor_pb2.StartRunResponse.FromString(messages[0]).workflow_id.startswith("wf-")
    # Claiming to be grpc-web elsewhere is no way around the limit.
    disguised = httpx.post(
        f"{gateway_server.url}/api/v1/tasks",
        content=json.dumps({"query": "d" * 70_000}),
        headers={
            "Authorization": f"Bearer {auth_stack.key_a}",
            "Content-Type": "application/grpc-web+json",
        },
        timeout=60,
    )
    _assert_refused(disguised)
