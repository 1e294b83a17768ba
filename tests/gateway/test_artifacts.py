"""Artifacts reach the user: a tool's HTML output is kept as an artifact, named on its
TOOL_OBSERVATION, served to the owning tenant only (sandboxed, bounded), and previewed by
the console in a frame where its script cannot run."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import create_key, drive
from tests.support.agent_model import AgentModel, answer, call
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.integration

PAGE = (
    "<!doctype html><h1>artifact-marker report</h1>"
    "<script>parent.__artifactRan = 1; alert('ran')</script>"
)
BIG_PAGE = "<!doctype html><p>" + "x" * 5000 + "</p>"
MAX_BYTES = 2048


class Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = (BIG_PAGE if self.path == "/big" else PAGE).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@dataclass
class Answer:
    status_code: int
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass
class ArtifactStack:
    stack: Stack
    key: str
    other: str
    small: str
    """A workflow whose web_fetch kept PAGE as an artifact."""
    big: str
    """One that kept BIG_PAGE, over the gateway's bound."""

    def get(self, workflow_id: str, name: str, key: str | None = None) -> Answer:
        """The path sent exactly as written: a client library would resolve '..' first."""
        host, port = self.stack.gateway.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            connection.request(
                "GET", f"/api/v1/tasks/{workflow_id}/artifacts/{name}", headers=headers
            )
            response = connection.getresponse()
            return Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            connection.close()

    def observation(self, workflow_id: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.key}"}
        page = httpx.get(
            f"{self.stack.gateway}/api/v1/tasks/{workflow_id}/events",
            params={"types": "TOOL_OBSERVATION"},
            headers=headers,
        ).json()
        payload: dict[str, Any] = page["events"][0]["payload"]
        return payload


def run_task(gateway: str, key: str, query: str) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=gateway, headers=headers, timeout=60) as client:
        # STANDARD: no routing call, so the model's script is the agent's alone.
        body = {"query": query, "mode": "standard"}
        created = client.post("/api/v1/tasks", json=body).json()
        with client.stream("GET", created["stream_url"]) as stream:
            for _ in stream.iter_lines():
                pass
    return str(created["workflow_id"])


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactStack]:
    pages = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{pages.server_address[1]}"
    model = ScriptedOpenAI().start()
    data_dir = Path(tmp_path_factory.mktemp("artifacts"))
    key, other = create_key(data_dir, "acme"), create_key(data_dir, "globex")
    stack = start_stack(
        data_dir,
        openai_base_url=model.base_url,
        extra_env={
            "SHUTTLE_AUTH": "required",
            "SHUTTLE_RATE_LIMIT": "100000/minute",
            "SHUTTLE_HTTP_ALLOW_HOSTS": json.dumps(["127.0.0.1"]),
            "SHUTTLE_ARTIFACT_MAX_BYTES": str(MAX_BYTES),
        },
    )
    try:
        runs = []
        for path in ("/page", "/big"):
            fetch = call("web_fetch", url=site + path, raw=True)
            model.set_handler(AgentModel(fetch, answer("Attached."), synthesis="Attached."))
            runs.append(run_task(stack.gateway, key, f"Fetch the report at {path}"))
        yield ArtifactStack(stack, key, other, *runs)
    finally:
        stack.stop()
        model.stop()
        pages.shutdown()


def test_the_observation_names_the_artifact(artifacts: ArtifactStack) -> None:
    observation = artifacts.observation(artifacts.small)
    [artifact] = observation["artifacts"]
    assert artifact["mime_type"] == "text/html"
    assert artifact["size_bytes"] == len(PAGE.encode())
    assert artifact["name"].endswith(".html")


def test_the_owner_gets_it_sandboxed(artifacts: ArtifactStack) -> None:
    [artifact] = artifacts.observation(artifacts.small)["artifacts"]
    served = artifacts.get(artifacts.small, artifact["name"], artifacts.key)
    assert served.status_code == 200 and served.text == PAGE
    headers = {name.lower(): value for name, value in served.headers.items()}
    assert headers["content-type"] == "text/html; charset=utf-8"
    csp = headers["content-security-policy"]
    assert csp.startswith("sandbox;") and "default-src 'none'" in csp
    assert headers["x-content-type-options"] == "nosniff"


def test_others_and_bad_names_are_refused_and_the_gateway_stays_up(
    artifacts: ArtifactStack,
) -> None:
    [artifact] = artifacts.observation(artifacts.small)["artifacts"]
    name = artifact["name"]
    assert artifacts.get(artifacts.small, name, artifacts.other).status_code == 404
    assert artifacts.get(artifacts.small, name).status_code == 401
    assert artifacts.get(artifacts.small, "nope.html", artifacts.key).status_code == 404
    for bad in ("..", "%2E%2E", ".hidden", "a..b.html", "x%00.html", "x%0A.html"):
        refused = artifacts.get(artifacts.small, bad, artifacts.key)
        assert refused.status_code == 400, bad
        assert "no artifact's name" in refused.json()["error"]["message"]
    # A path out of the artifacts directory never matches the route at all.
    escaped = artifacts.get(artifacts.small, "..%2F..%2Fetc%2Fpasswd", artifacts.key)
    assert escaped.status_code == 404 and "root:" not in escaped.text
    assert artifacts.get(artifacts.small, name, artifacts.key).status_code == 200


def test_an_artifact_over_the_bound_is_refused_naming_it(artifacts: ArtifactStack) -> None:
    [artifact] = artifacts.observation(artifacts.big)["artifacts"]
    assert artifact["size_bytes"] > MAX_BYTES
    refused = artifacts.get(artifacts.big, artifact["name"], artifacts.key)
    assert refused.status_code == 422
    assert "SHUTTLE_ARTIFACT_MAX_BYTES" in refused.json()["error"]["message"]


def test_the_console_previews_it_in_a_frame_that_runs_nothing(
    artifacts: ArtifactStack, browser_tools: Path
) -> None:
    result = drive("artifact", artifacts.stack.gateway, artifacts.key, artifacts.small)
    assert result.get("pageErrors") is None
    assert result["button"].startswith("Preview ") and result["button"].endswith("B)")
    assert result["sandbox"] == "" and result["srcdocHasMarker"]
    assert result["heading"] == "artifact-marker report"
    assert (result["ran"], result["dialogs"]) == (0, [])
