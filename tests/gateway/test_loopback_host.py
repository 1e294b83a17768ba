"""With SHUTTLE_AUTH=off the gateway answers loopback names only: a page whose DNS name is
rebound to 127.0.0.1 gets 421 on every route and on grpc-web; with auth required, any Host
is answered (the key decides)."""

from __future__ import annotations

import httpx
import pytest

from gateway.edge.loopback_host import is_loopback_host
from shuttle.v1 import tools_pb2
from tests.gateway.conftest import AuthStack
from tests.gateway.test_grpc_web import frame
from tests.support.gateway_server import GatewayServer

pytestmark = pytest.mark.integration

AUTH_OFF = [{"auth": "off", "rate_limit": "100000/minute"}]
GRPC_WEB = {"content-type": "application/grpc-web+proto", "x-grpc-web": "1"}
LIST_TOOLS = frame(tools_pb2.ListToolsRequest().SerializeToString())


def requests(client: httpx.Client, host: str) -> list[httpx.Response]:
    """An HTTP route, an SSE route and a grpc-web call, each addressed to `host`."""
    return [
        client.get("/api/v1/tasks", headers={"Host": host}),
        client.get("/api/v1/stream/sse?workflow_id=wf-x", headers={"Host": host}),
        client.post(
            "/shuttle.v1.ToolService/ListTools",
            content=LIST_TOOLS,
            headers={**GRPC_WEB, "Host": host},
        ),
    ]


@pytest.mark.parametrize("gateway_server", AUTH_OFF, indirect=True)
@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "localhost.evil.example"])
def test_a_rebound_name_is_refused_while_auth_is_off(
    gateway_server: GatewayServer, host: str
) -> None:
    with httpx.Client(base_url=gateway_server.url, timeout=60) as client:
        for response in requests(client, host):
            assert response.status_code == 421, response.text
            error = response.json()["error"]
            assert error["code"] == "misdirected_request"
            assert host in error["message"] and "SHUTTLE_AUTH=required" in error["message"]
        # Still up, for the names it serves.
        assert client.get("/api/v1/tasks").status_code == 200


@pytest.mark.parametrize("gateway_server", AUTH_OFF, indirect=True)
@pytest.mark.parametrize(
    "host",
    ["localhost:8080", "localhost", "127.0.0.1", "127.0.0.2:80", "[::1]:8080", "a.localhost"],
)
def test_loopback_names_are_answered_while_auth_is_off(
    gateway_server: GatewayServer, host: str
) -> None:
    with httpx.Client(base_url=gateway_server.url, timeout=60) as client:
        listed, _, grpc_web = requests(client, host)
    assert listed.status_code == 200, listed.text
    assert grpc_web.status_code == 200 and grpc_web.headers.get("grpc-status") is None


def test_any_name_is_answered_with_auth_required(auth_stack: AuthStack) -> None:
    with httpx.Client(
        base_url=auth_stack.url,
        headers={"Authorization": f"Bearer {auth_stack.key_a}"},
        timeout=60,
    ) as client:
        listed, _, grpc_web = requests(client, "shuttle.example.com")
    assert listed.status_code == 200, listed.text
    assert grpc_web.status_code == 200 and grpc_web.headers.get("grpc-status") is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST.:8080", True),
        ("app.localhost", True),
        ("127.255.0.1:1", True),
        ("[::1]", True),
        ("", False),
        ("::1", False),  # an IPv6 Host is bracketed
        ("[::1]evil", False),
        ("localhost:http", False),
        ("127.0.0.1.nip.io", False),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("[::2]:8080", False),
    ],
)
def test_what_counts_as_a_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
