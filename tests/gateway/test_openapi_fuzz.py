"""schemathesis against /openapi.json: whatever it sends, the gateway never answers 5xx.

Every operation is driven with a valid key, with no key, with a key that does not exist and
with another tenant's key; path ids are sometimes those of a real workflow and session, so
the requests reach the backends rather than stopping at "not found". Every error is the
JSON error body.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.conftest import AuthStack

pytestmark = pytest.mark.integration

# The operations the HTTP API promises; the schema must publish each of them.
PROMISED = {
    "POST /api/v1/tasks",
    "GET /api/v1/tasks",
    "GET /api/v1/tasks/{workflow_id}",
    "GET /api/v1/tasks/{workflow_id}/events",
    "GET /api/v1/tasks/{workflow_id}/stream",
    "GET /api/v1/stream/sse",
    "POST /api/v1/stream/ticket",
    "POST /api/v1/tasks/{workflow_id}/pause",
    "POST /api/v1/tasks/{workflow_id}/resume",
    "POST /api/v1/tasks/{workflow_id}/cancel",
    "POST /api/v1/tasks/{workflow_id}/interrupt",
    "POST /api/v1/approvals/{approval_id}",
    "GET /api/v1/sessions",
    "GET /api/v1/sessions/{session_id}",
    "GET /api/v1/sessions/{session_id}/events",
    "DELETE /api/v1/sessions/{session_id}",
    "POST /v1/chat/completions",
    "GET /v1/models",
    "GET /healthz",
    "GET /readyz",
}
PUBLIC = {"GET /healthz", "GET /readyz", "GET /api/v1/config"}
# Examples per operation for each way of calling: most with a valid key.
EXAMPLES = {"valid": 20, "none": 4, "unknown_key": 4, "other_tenant": 6}


@dataclass(frozen=True)
class RealIds:
    workflow_id: str
    session_id: str


@pytest.fixture
def real_ids(auth_stack: AuthStack) -> RealIds:
    """A finished workflow and its session, of tenant acme, that only this test touches
    (the fuzzer may delete the session)."""
    with auth_stack.client(auth_stack.key_a) as client:
        created = client.post("/api/v1/tasks", json={"query": "What is 3*5?"}).json()
        path = f"/api/v1/stream/sse?workflow_id={created['workflow_id']}"
        with client.stream("GET", path) as response:
            assert response.status_code == 200
            for _ in response.iter_lines():
                pass
    return RealIds(created["workflow_id"], created["session_id"])


@pytest.fixture(scope="module")
def operations(auth_stack: AuthStack) -> Iterator[list[Any]]:
    schema = schemathesis.openapi.from_url(f"{auth_stack.url}/openapi.json")
    yield [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]


def name_of(operation: Any) -> str:
    return f"{operation.method.upper()} {operation.path}"


def test_the_schema_publishes_every_promised_operation(operations: list[Any]) -> None:
    assert {name_of(op) for op in operations} >= PROMISED


def _headers(auth: str, stack: AuthStack) -> dict[str, str]:
    key = {"valid": stack.key_a, "other_tenant": stack.key_b, "unknown_key": "sk-shuttle-nope"}
    return {"Authorization": f"Bearer {key[auth]}"} if auth in key else {}


def _use_real_ids(case: Any, ids: RealIds) -> bool:
    """Point the case at the real workflow and session wherever it names one."""
    replaced = False
    for params in (case.path_parameters, case.query, case.body):
        if not isinstance(params, dict):
            continue
        if "workflow_id" in params:
            params["workflow_id"], replaced = ids.workflow_id, True
        if "session_id" in params:
            params["session_id"], replaced = ids.session_id, True
    if case.path == "/v1/chat/completions" and isinstance(case.body, dict):
        # A model that exists and a question at the end, so a real run answers.
        case.body["model"] = "shuttle-auto"
        case.body["messages"] = [*case.body["messages"], {"role": "user", "content": "2*3?"}]
    return replaced


@pytest.mark.parametrize("auth", list(EXAMPLES))
def test_no_server_errors_on_any_operation(
    auth_stack: AuthStack, operations: list[Any], real_ids: RealIds, auth: str
) -> None:
    failures: list[str] = []
    tried: Counter[str] = Counter()
    # Deletions last, so the other operations find the real session still there.
    for operation in sorted(operations, key=lambda op: op.method.upper() == "DELETE"):
        fuzz_operation(operation, auth, auth_stack, real_ids, failures, tried)
    assert failures == []
    assert set(tried) == {name_of(op) for op in operations}


def fuzz_operation(
    operation: Any,
    auth: str,
    stack: AuthStack,
    real_ids: RealIds,
    failures: list[str],
    tried: Counter[str],
) -> None:
    name = name_of(operation)
    headers = _headers(auth, stack)

    @given(case=operation.as_strategy(), real=st.booleans())
    @settings(
        max_examples=EXAMPLES[auth],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any, real: bool) -> None:
        on_real_ids = real and _use_real_ids(case, real_ids)
        response = case.call(headers=headers, timeout=60)
        tried[name] += 1
        status = response.status_code
        where = f"{case.method} {case.formatted_path} [{auth}] -> {status}: {response.text[:300]}"
        if status >= 500:
            failures.append(where)
            return
        if status >= 400:
            error = response.json()["error"]
            assert error["code"] and error["message"], where
            assert str(status) in operation.definition.raw["responses"], f"undocumented: {where}"
        if name in PUBLIC:
            return
        if auth in ("none", "unknown_key"):
            assert status == 401, where
        elif auth == "other_tenant" and on_real_ids:
            if name == "POST /api/v1/tasks":
                if status == 201:
                    _assert_own_session(stack, response.json()["session_id"], real_ids)
            elif "{session_id}" in name and status < 300:
                # Sessions are per tenant: an earlier case may have opened this tenant's own
                # session under the same id. Whatever it holds, none of it is acme's.
                assert real_ids.workflow_id not in response.text, where
            else:
                assert status in (400, 404), where

    check()


def _assert_own_session(stack: AuthStack, session_id: str, real_ids: RealIds) -> None:
    """Another tenant naming acme's session id gets a session of its own, without acme's turns."""
    with stack.client(stack.key_b) as client:
        turns = client.get(f"/api/v1/sessions/{session_id}").json()["turns"]
    assert real_ids.workflow_id not in [turn["workflow_id"] for turn in turns]
