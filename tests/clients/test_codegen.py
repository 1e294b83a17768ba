"""docs/clients.md, followed: `buf generate` with the repository's buf.gen.yaml makes Go and
TypeScript clients of every service (the TypeScript type-checks), and the `buf curl`
walkthrough starts a run and reads its log over plain gRPC with the schema from proto/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.conftest import BIN, CLIENT_DIR, TENANT
from tests.support.stack import Stack

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("EventService", "ExecutorService", "PlannerService", "ToolService")


def tool_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.fixture(scope="module")
def generated() -> Iterator[Path]:
    for plugin in ("protoc-gen-go", "protoc-gen-go-grpc"):
        if shutil.which(plugin) is None:
            pytest.fail(f"{plugin} is required (Debian package {plugin}; see .ci/run)")
    # Inside the npm package, so the TypeScript finds @bufbuild/protobuf.
    out = CLIENT_DIR / "generated"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(
        [str(BIN / "buf"), "generate", "--output", str(out)],
        cwd=ROOT,
        env=tool_env(),
        check=True,
        timeout=300,
    )
    yield out
    shutil.rmtree(out, ignore_errors=True)


def test_buf_generates_a_go_client_of_every_service(generated: Path) -> None:
    go = generated / "gen" / "go" / "shuttle" / "v1"
    sources = "".join(path.read_text() for path in go.glob("*_grpc.pb.go"))
    for service in SERVICES:
        assert f"func New{service}Client(" in sources


def test_buf_generates_typescript_that_type_checks(generated: Path) -> None:
    ts = sorted((generated / "gen" / "ts" / "shuttle" / "v1").glob("*.ts"))
    text = "".join(path.read_text() for path in ts)
    for service in SERVICES:
        assert f"export const {service}" in text
    checked = subprocess.run(
        [
            str(BIN / "tsc"),
            "--noEmit",
            "--strict",
            "--target",
            "es2022",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            *map(str, ts),
        ],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def buf_curl(stack: Stack, process: str, method: str, body: dict[str, object]) -> str:
    """`method` (`Service/Method`) of the stack's `process`, answered as buf prints it."""
    completed = subprocess.run(
        [
            str(BIN / "buf"),
            "curl",
            "--schema",
            str(ROOT / "proto"),
            "--protocol",
            "grpc",
            "--http2-prior-knowledge",
            "-H",
            f"authorization: Bearer {stack.token}",
            "-d",
            json.dumps(body),
            f"http://{stack.target(process)}/shuttle.v1.{method}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_the_buf_curl_walkthrough_starts_a_run_and_reads_its_log(stack: Stack) -> None:
    started = json.loads(
        buf_curl(
            stack,
            "executor",
            "ExecutorService/StartRun",
            {"query": "What is 12*7?", "tenantId": TENANT},
        )
    )
    workflow_id = started["workflowId"]
    # A server stream prints one JSON object per message.
    log = buf_curl(
        stack,
        "events",
        "EventService/Stream",
        {"workflowId": workflow_id, "tenantId": TENANT, "fromSeq": 1},
    )
    decoder = json.JSONDecoder()
    events, at = [], 0
    while at < len(log.strip()):
        event, at = decoder.raw_decode(log, at)
        events.append(event)
        while at < len(log) and log[at].isspace():
            at += 1
    assert [event["seq"] for event in events] == [str(n) for n in range(1, len(events) + 1)]
    assert events[-1]["type"] == "EVENT_TYPE_STREAM_END"
    assert "EVENT_TYPE_WORKFLOW_COMPLETED" in [event["type"] for event in events]
