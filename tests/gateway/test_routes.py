"""Gateway routes against the real stack (offline demo model)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.errors import ApiError
from gateway.routes.stream import resume_point
from shuttle.settings import child_environment
from tests.support.sse import read_stream
from tests.support.stack import free_ports, start_stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data_dir = Path(tmp_path_factory.mktemp("gateway"))
    stack = start_stack(data_dir)
    yield stack.gateway, data_dir
    stack.stop()


@pytest.fixture(scope="module")
def gateway(running: tuple[str, Path]) -> str:
    return running[0]


def test_auth_off_on_loopback_uses_the_default_tenant_and_says_so(
    running: tuple[str, Path],
) -> None:
    url, data_dir = running
    log = (data_dir / "logs" / "gateway.log").read_text()
    assert "authentication is off (loopback only): every caller is tenant 'default'" in log
    assert "stream tickets are signed with a key generated for this process" in log
    assert httpx.get(f"{url}/api/v1/tasks").status_code == 200
    assert httpx.get(f"{url}/api/v1/config").json()["auth"] == "off"


@pytest.fixture(scope="module")
def finished(gateway: str) -> str:
    """A workflow that has run to its end."""
    created = httpx.post(f"{gateway}/api/v1/tasks", json={"query": "What is 2*21?"}).json()
    status, _ = read_stream(gateway, f"/api/v1/stream/sse?workflow_id={created['workflow_id']}")
    assert status == 200
    return str(created["workflow_id"])


def test_resume_point_reads_header_then_query() -> None:
    assert resume_point(None, None) == 1
    assert resume_point("7", "2") == 8
    assert resume_point(None, "2") == 3
    with pytest.raises(ApiError):
        resume_point("abc", None)
    with pytest.raises(ApiError):
        resume_point("-4", None)


def test_resume_by_query_parameter_and_type_filter(gateway: str, finished: str) -> None:
    _, everything = read_stream(gateway, f"/api/v1/stream/sse?workflow_id={finished}")
    _, resumed = read_stream(gateway, f"/api/v1/stream/sse?workflow_id={finished}&last_event_id=5")
    assert [f.id for f in resumed] == [f.id for f in everything[5:]]

    _, filtered = read_stream(
        gateway, f"/api/v1/stream/sse?workflow_id={finished}&types=TOOL_INVOKED,tool_observation"
    )
    assert [f.event for f in filtered] == ["TOOL_INVOKED", "TOOL_OBSERVATION", "STREAM_END"]


def test_bad_stream_parameters_are_400(gateway: str, finished: str) -> None:
    bad_type = httpx.get(f"{gateway}/api/v1/stream/sse?workflow_id={finished}&types=NOPE")
    assert bad_type.status_code == 400
    assert "NOPE" in bad_type.json()["error"]["message"]
    bad_resume = httpx.get(
        f"{gateway}/api/v1/stream/sse?workflow_id={finished}",
        headers={"Last-Event-ID": "yesterday"},
    )
    assert bad_resume.status_code == 400
    missing = httpx.get(f"{gateway}/api/v1/stream/sse")
    assert missing.status_code == 400
    assert "workflow_id" in missing.json()["error"]["message"]


def test_history_pages(gateway: str, finished: str) -> None:
    page = httpx.get(f"{gateway}/api/v1/tasks/{finished}/events?limit=3").json()
    assert [e["seq"] for e in page["events"]] == [1, 2, 3]
    assert page["next_seq"] == 4
    rest = httpx.get(f"{gateway}/api/v1/tasks/{finished}/events?from_seq=4&limit=1000").json()
    assert rest["events"][-1]["type"] == "STREAM_END"
    assert rest["next_seq"] is None
    too_many = httpx.get(f"{gateway}/api/v1/tasks/{finished}/events?limit=1001")
    assert too_many.status_code == 400


def test_task_status_and_result(gateway: str, finished: str) -> None:
    task = httpx.get(f"{gateway}/api/v1/tasks/{finished}").json()
    assert task["status"] == "completed"
    assert task["result"] == "[demo model] 2*21 = 42"
    usage = task["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert task["duration_ms"] >= 0


def test_unknown_mode_and_complex_mode(gateway: str) -> None:
    unknown = httpx.post(f"{gateway}/api/v1/tasks", json={"query": "x", "mode": "turbo"})
    assert unknown.status_code == 400
    complex_mode = httpx.post(f"{gateway}/api/v1/tasks", json={"query": "x", "mode": "complex"})
    assert complex_mode.status_code == 201, complex_mode.text


def test_operations_endpoints(gateway: str) -> None:
    assert httpx.get(f"{gateway}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway}/readyz").json()
    backends = dict.fromkeys(("executor", "events", "tools", "planner"), "SERVING")
    assert ready == {"status": "ready", "backends": backends}
    assert "/api/v1/tasks" in httpx.get(f"{gateway}/openapi.json").json()["paths"]
    nowhere = httpx.get(f"{gateway}/api/v1/nowhere")
    assert nowhere.status_code == 404
    assert nowhere.json()["error"]["code"] == "not_found"


def test_metrics_on_their_own_port_leave_the_public_one(gateway: str, tmp_path: Path) -> None:
    # Unset, /metrics is served where the API is.
    public = httpx.get(f"{gateway}/metrics")
    assert public.status_code == 200 and "shuttle_sse_connections" in public.text

    api_port, metrics_port = free_ports(2)
    variables = {
        "SHUTTLE_GATEWAY_HOST": "127.0.0.1",
        "SHUTTLE_GATEWAY_PORT": str(api_port),
        "SHUTTLE_METRICS_PORT": str(metrics_port),
        "SHUTTLE_DATA_DIR": str(tmp_path),
        "SHUTTLE_DATABASE_URL": "",
        "OTEL_TRACES_EXPORTER": "none",
    }
    log = (tmp_path / "gateway.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway"],
        env=child_environment(variables),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{api_port}"
        wait_for_health(process, url)
        hidden = httpx.get(f"{url}/metrics")
        assert hidden.status_code == 404
        assert hidden.json()["error"]["code"] == "not_found"
        served = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert served.status_code == 200 and "shuttle_sse_connections" in served.text
        # Bound to the gateway's host only: another loopback address finds nothing there.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.2:{metrics_port}/metrics")
        assert httpx.get(f"{url}/healthz").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def wait_for_health(process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "the gateway exited"
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the gateway did not come up"
        time.sleep(0.1)


def test_the_published_schema_documents_the_errors_the_gateway_sends(gateway: str) -> None:
    """Invalid input is answered 400 with the JSON error body, and the schema says so
    (FastAPI alone would publish a 422 with a body the gateway never sends)."""
    schema = httpx.get(f"{gateway}/openapi.json").json()
    assert "HTTPValidationError" not in str(schema)
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            if operation.get("parameters") or operation.get("requestBody"):
                assert "400" in operation["responses"], where
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert response.get("content") == error_body, f"{where} {status}"
    invalid = httpx.post(f"{gateway}/api/v1/tasks", json={"query": 5})
    assert invalid.status_code == 400
    assert schema["paths"]["/api/v1/tasks"]["post"]["responses"]["400"]
    error = invalid.json()["error"]
    assert set(error) == set(
        schema["components"]["schemas"]["Error"]["properties"]["error"]["required"]
    )
