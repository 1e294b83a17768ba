"""Approvals over grpc-web: the decider is the caller's API key, whatever the request says,
and another tenant cannot see the approval at all."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.stores.keys import KeyStore
from shuttle.db import create_engine
from shuttle.settings import Settings
from shuttle.v1 import tools_pb2
from tests.gateway.conftest import start_gated
from tests.gateway.test_approvals import of_type, run_with_decision
from tests.gateway.test_grpc_web import call
from tests.support.stack import Stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path, str, str]]:
    """A stack whose calculator needs a human's approval, its data directory, and keys of
    two tenants."""
    data_dir = Path(tmp_path_factory.mktemp("grpc-web-approvals"))
    stack, key_a, key_b = start_gated(data_dir)
    yield stack, data_dir, key_a, key_b
    stack.stop()


def key_id_of(data_dir: Path, secret: str) -> str:
    """The id the gateway knows a key by, read from its key store."""

    async def lookup() -> str:
        engine = create_engine(Settings(data_dir=data_dir, database_url="").sqlalchemy_url)
        try:
            key = await KeyStore(engine).verify(secret)
        finally:
            await engine.dispose()
        assert key is not None
        return key.key_id

    return asyncio.run(lookup())


def approvals(url: str, key: str, workflow_id: str) -> list[tools_pb2.Approval]:
    request = tools_pb2.ListApprovalsRequest(workflow_id=workflow_id, tenant_id="acme")
    _, [reply], trailers = call(
        url, "/shuttle.v1.ToolService/ListApprovals", request.SerializeToString(), key
    )
    assert trailers["grpc-status"] == "0", trailers
    return list(tools_pb2.ListApprovalsResponse.FromString(reply).approvals)


def test_the_decider_is_the_callers_key(gated: tuple[Stack, Path, str, str]) -> None:
    stack, data_dir, key_a, key_b = gated
    url = stack.gateway
    decided: dict[str, object] = {}

    def decide(_client: httpx.Client, approval_id: str) -> None:
        forged = tools_pb2.DecideApprovalRequest(
            approval_id=approval_id,
            tenant_id="acme",
            decision="approved",
            comment="looks fine",
            decided_by="the-administrator",
        ).SerializeToString()
        path = "/shuttle.v1.ToolService/DecideApproval"
        # Another tenant's key, even naming acme's tenant, finds no such approval.
        _, _, foreign = call(url, path, forged, key_b)
        decided["foreign"] = foreign["grpc-status"]
        _, [reply], trailers = call(url, path, forged, key_a)
        assert trailers["grpc-status"] == "0", trailers
        decided["approval"] = tools_pb2.Approval.FromString(reply)

    events = run_with_decision(url, key_a, "What is 12*7?", decide)
    key_id = key_id_of(data_dir, key_a)
    assert key_id != "the-administrator"
    assert decided["foreign"] == "5"  # NOT_FOUND
    approval = decided["approval"]
    assert isinstance(approval, tools_pb2.Approval)
    assert (approval.status, approval.decided_by) == ("approved", key_id)
    assert of_type(events, "APPROVAL_DECISION")["payload"]["approved_by"] == key_id
    [listed] = approvals(url, key_a, approval.workflow_id)
    assert (listed.decided_by, listed.comment) == (key_id, "looks fine")
    assert approvals(url, key_b, approval.workflow_id) == []
