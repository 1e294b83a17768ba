"""API keys, tenancy on every route, stream tickets, rate limits, the loopback rule."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.edge.tickets import TicketError, TicketSigner
from gateway.stores.db import create_schema
from gateway.stores.keys import KeyStore
from shuttle.db import create_engine
from tests.gateway.conftest import TICKET_SECRET, AuthStack
from tests.support.gateway_server import GatewayServer
from tests.support.sse import read_stream

POSTGRES_ADMIN = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        made = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}")
        await create_schema(made)
        yield made
        await made.dispose()
        return
    name = f"shuttle_gw_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN).execution_options(isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    made = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}")
    try:
        await create_schema(made)
        yield made
    finally:
        await made.dispose()
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE "{name}"'))
        await admin.dispose()


async def test_keys_are_stored_hashed_and_bound_to_a_tenant(engine: AsyncEngine) -> None:
    store = KeyStore(engine)
    made = await store.create("acme", "ci")
    assert made.secret.startswith("sk-shuttle-") and len(made.secret) > 40
    found = await store.verify(made.secret)
    assert found is not None and found.tenant_id == "acme" and found.key_id == made.key.key_id
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT key_hash FROM gateway_api_keys"))).scalars().all()
    assert made.secret not in stored and len(stored[0]) == 64
    assert await store.verify(made.secret + "x") is None
    assert await store.verify("not-a-key") is None
    assert await store.revoke(made.key.key_id)
    assert await store.verify(made.secret) is None
    with pytest.raises(ValueError, match="tenant"):
        await store.create("bad tenant!")


def test_tickets_are_bound_signed_and_expire() -> None:
    now = [1_000.0]
    signer = TicketSigner(b"secret", ttl_seconds=60, clock=lambda: now[0])
    token, ticket = signer.issue("acme", "wf-1", "key-1")
    assert signer.verify(token) == ticket
    assert ticket.expires_at == 1_060
    body, _, mac = token.partition(".")
    with pytest.raises(TicketError, match="not valid"):
        signer.verify(body + "." + mac[::-1])
    with pytest.raises(TicketError, match="not valid"):
        TicketSigner(b"other", 60, clock=lambda: now[0]).verify(token)
    now[0] = 1_060.0
    with pytest.raises(TicketError, match="expired"):
        signer.verify(token)


@pytest.mark.integration
def test_requests_without_a_valid_key_are_401(auth_stack: AuthStack) -> None:
    with auth_stack.client() as anonymous:
        missing = anonymous.get("/api/v1/tasks")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer" in missing.json()["error"]["message"]
        wrong = anonymous.get("/api/v1/tasks", headers={"Authorization": "Bearer sk-shuttle-nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "unauthenticated"
        by_header = anonymous.get("/api/v1/tasks", headers={"X-API-Key": auth_stack.key_a})
        assert by_header.status_code == 200
        # Operations and the console's own bootstrap stay open.
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/api/v1/config").json()["auth"] == "required"


@pytest.mark.integration
def test_another_tenants_workflow_is_404_on_every_route(
    auth_stack: AuthStack, finished_a: str
) -> None:
    wf = finished_a
    with auth_stack.client(auth_stack.key_b) as other, auth_stack.client(auth_stack.key_a) as own:
        assert own.get(f"/api/v1/tasks/{wf}").status_code == 200
        refused = {
            "task": other.get(f"/api/v1/tasks/{wf}"),
            "events": other.get(f"/api/v1/tasks/{wf}/events"),
            "ticket": other.post("/api/v1/stream/ticket", json={"workflow_id": wf}),
            "pause": other.post(f"/api/v1/tasks/{wf}/pause"),
            "resume": other.post(f"/api/v1/tasks/{wf}/resume"),
            "cancel": other.post(f"/api/v1/tasks/{wf}/cancel"),
            "interrupt": other.post(f"/api/v1/tasks/{wf}/interrupt", json={"message": "hi"}),
        }
        for route, response in refused.items():
            assert response.status_code == 404, (route, response.text)
            assert response.json()["error"]["code"] == "not_found", route
        listed = other.get("/api/v1/tasks").json()["tasks"]
        assert wf not in [t["workflow_id"] for t in listed]
        assert wf in [t["workflow_id"] for t in own.get("/api/v1/tasks").json()["tasks"]]
    headers = {"Authorization": f"Bearer {auth_stack.key_b}"}
    for path in (f"/api/v1/stream/sse?workflow_id={wf}", f"/api/v1/tasks/{wf}/stream?dialect=fim"):
        status, frames = read_stream(auth_stack.url, path, headers=headers)
        assert (status, frames) == (404, []), path


@pytest.mark.integration
def test_stream_tickets_open_only_their_workflow_and_expire(
    auth_stack: AuthStack, finished_a: str
) -> None:
    with auth_stack.client(auth_stack.key_a) as own:
        issued = own.post("/api/v1/stream/ticket", json={"workflow_id": finished_a}).json()
        other_wf = own.post("/api/v1/tasks", json={"query": "What is 1+1?"}).json()["workflow_id"]
    assert 0 < issued["expires_in"] <= 300
    status, frames = read_stream(auth_stack.url, issued["stream_url"])
    assert status == 200 and frames[-1].event == "STREAM_END"
    status, frames = read_stream(auth_stack.url, issued["fim_stream_url"])
    assert status == 200 and frames[-1].event == "done"

    ticket = issued["ticket"]
    status, _ = read_stream(
        auth_stack.url, f"/api/v1/stream/sse?workflow_id={other_wf}&ticket={ticket}"
    )
    assert status == 404
    # A ticket opens streams only; it is no key for the rest of the API.
    assert (
        httpx.get(f"{auth_stack.url}/api/v1/tasks/{finished_a}?ticket={ticket}").status_code == 401
    )

    past = TicketSigner(TICKET_SECRET.encode(), 60, clock=lambda: time.time() - 3600)
    expired, _ = past.issue("acme", finished_a, "key-x")
    refused = httpx.get(
        f"{auth_stack.url}/api/v1/stream/sse?workflow_id={finished_a}&ticket={expired}"
    )
    assert refused.status_code == 401
    assert "expired" in refused.json()["error"]["message"]
    forged = TicketSigner(b"guessed", 60).issue("acme", finished_a, "key-x")[0]
    assert (
        httpx.get(
            f"{auth_stack.url}/api/v1/stream/sse?workflow_id={finished_a}&ticket={forged}"
        ).status_code
        == 401
    )


@pytest.mark.integration
def test_a_malformed_ticket_is_401_whatever_it_holds(
    auth_stack: AuthStack, finished_a: str
) -> None:
    with auth_stack.client(auth_stack.key_a) as own:
        valid = own.post("/api/v1/stream/ticket", json={"workflow_id": finished_a}).json()
    body, mac = valid["ticket"].split(".")
    for ticket in (
        "é.é",
        f"{body}.{mac}é",
        f"{body}é.{mac}",
        "日本.語",
        "\x00.\x00",
        ".",
        "..",
        "no-dot-at-all",
        f"{body}.",
        f".{mac}",
        "%ff%fe.%ff",
    ):
        refused = httpx.get(
            f"{auth_stack.url}/api/v1/stream/sse",
            params={"workflow_id": finished_a, "ticket": ticket},
        )
        assert refused.status_code == 401, ticket
        assert refused.json()["error"]["code"] == "unauthenticated", ticket
    # Raw bytes that are no UTF-8 at all, as a client may put them in the URL.
    raw = httpx.get(f"{auth_stack.url}/api/v1/stream/sse?workflow_id={finished_a}&ticket=%ff.%fe")
    assert raw.status_code == 401
    status, frames = read_stream(auth_stack.url, valid["stream_url"])
    assert status == 200 and frames[-1].event == "STREAM_END"


@pytest.mark.integration
@pytest.mark.parametrize("gateway_server", [{"rate_limit": "3/minute"}], indirect=True)
def test_each_key_has_its_own_rate_limit(
    auth_stack: AuthStack, gateway_server: GatewayServer
) -> None:
    a = {"Authorization": f"Bearer {auth_stack.key_a}"}
    b = {"Authorization": f"Bearer {auth_stack.key_b}"}
    codes = [
        httpx.get(f"{gateway_server.url}/api/v1/tasks", headers=a).status_code for _ in range(3)
    ]
    assert codes == [200, 200, 200]
    limited = httpx.get(f"{gateway_server.url}/api/v1/tasks", headers=a)
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert httpx.get(f"{gateway_server.url}/api/v1/tasks", headers=b).status_code == 200


@pytest.mark.integration
def test_gateway_refuses_a_public_address_without_auth(tmp_path) -> None:
    refusal = gateway_refusal(
        {
            "SHUTTLE_GATEWAY_HOST": "0.0.0.0",
            "SHUTTLE_AUTH": "off",
            "SHUTTLE_DATA_DIR": str(tmp_path),
        }
    )
    assert "refusing to listen on 0.0.0.0 without authentication" in refusal
    assert "SHUTTLE_AUTH=required" in refusal


def gateway_refusal(variables: dict[str, str]) -> str:
    """What `python -m gateway` says as it refuses to start with `variables` set."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway"],
        env={**os.environ, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    return done.stderr


def sse_status(url: str, workflow_id: str, ticket: str) -> int:
    with httpx.stream(
        "GET", f"{url}/api/v1/stream/sse", params={"workflow_id": workflow_id, "ticket": ticket}
    ) as response:
        return response.status_code


@pytest.mark.parametrize(
    "gateway_server", [{}, {"ticket_secret": "another-deployment"}], indirect=True
)
def test_a_ticket_passes_on_every_gateway_sharing_the_secret(
    auth_stack: AuthStack, gateway_server: GatewayServer, finished_a: str
) -> None:
    with auth_stack.client(auth_stack.key_a) as own:
        ticket = own.post("/api/v1/stream/ticket", json={"workflow_id": finished_a}).json()
    shared = gateway_server.app.state.settings.ticket_secret == TICKET_SECRET
    status = sse_status(gateway_server.url, finished_a, ticket["ticket"])
    assert status == (200 if shared else 401)


@pytest.mark.integration
def test_gateway_replicas_refuse_to_start_without_a_shared_ticket_secret(tmp_path) -> None:
    refusal = gateway_refusal(
        {
            "SHUTTLE_GATEWAY_REPLICAS": "2",
            "SHUTTLE_TICKET_SECRET": "",
            "SHUTTLE_DATA_DIR": str(tmp_path),
        }
    )
    assert "2 gateway replicas need one SHUTTLE_TICKET_SECRET" in refusal
