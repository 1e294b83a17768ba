"""The `shuttle` CLI against a running gateway with authentication."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess

import httpx
import pytest

from tests.gateway.conftest import AuthStack
from tests.support.cutting_proxy import CuttingProxy
from tests.support.sse import read_stream

pytestmark = pytest.mark.integration


def shuttle(
    stack: AuthStack, *args: str, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHUTTLE_GATEWAY_URL": stack.url, "SHUTTLE_API_KEY": key or stack.key_a}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_run_streams_steps_and_the_answer(auth_stack: AuthStack) -> None:
    done = shuttle(auth_stack, "run", "What is 7*8?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[demo model] 7*8 = 56"
    assert '→ calculator {"expression": "7*8"}' in done.stderr
    assert "← calculator" in done.stderr and ": 56" in done.stderr
    assert "tokens" in done.stderr.splitlines()[-1]
    workflow_id = done.stderr.splitlines()[0].removeprefix("workflow ")

    listed = shuttle(auth_stack, "tasks")
    assert workflow_id in listed.stdout
    events = shuttle(auth_stack, "events", workflow_id)
    lines = events.stdout.splitlines()
    assert "WORKFLOW_STARTED" in lines[0] and "STREAM_END" in lines[-1]
    # Another tenant's key sees nothing of it.
    foreign = shuttle(auth_stack, "events", workflow_id, key=auth_stack.key_b)
    assert foreign.returncode == 1 and "404" in foreign.stderr


def test_approve_reports_the_services_answer(auth_stack: AuthStack) -> None:
    done = shuttle(auth_stack, "approve", "ap-1")
    assert done.returncode == 1
    assert "404" in done.stderr and "ap-1" in done.stderr


def test_run_resumes_after_a_dropped_connection(auth_stack: AuthStack) -> None:
    port = int(auth_stack.url.rsplit(":", 1)[1])
    proxy = CuttingProxy(port, frames_before_cut=3).start()
    try:
        env = {
            **os.environ,
            "SHUTTLE_GATEWAY_URL": f"http://127.0.0.1:{proxy.port}",
            "SHUTTLE_API_KEY": auth_stack.key_a,
        }
        done = subprocess.run(
            [sys.executable, "-m", "cli", "run", "What is 9*9?"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        proxy.stop()
    assert proxy.cuts == 1
    assert done.returncode == 0, done.stderr
    assert "(connection lost" in done.stderr
    assert done.stdout.strip() == "[demo model] 9*9 = 81"
    # Resumed from the last seq: no step is shown twice.
    assert done.stderr.count("→ calculator") == 1
    assert done.stderr.count("← calculator") == 1


def apikey(data_dir: Path | None, *args: str, cwd: Path | None = None) -> CompletedProcess[str]:
    """`shuttle apikey …` on the SQLite database under `data_dir` (None: the default, var/)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("SHUTTLE_DATA_DIR", "SHUTTLE_DATABASE_URL")
    }
    if data_dir is not None:
        env["SHUTTLE_DATA_DIR"] = str(data_dir)
    return subprocess.run(
        [sys.executable, "-m", "cli", "apikey", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_apikey_create_on_a_fresh_checkout_makes_its_database(tmp_path: Path) -> None:
    made = apikey(None, "create", "--tenant", "acme", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("sk-shuttle-")
    assert "Traceback" not in made.stderr
    database = tmp_path / "var" / "shuttle.db"
    with sqlite3.connect(database) as db:
        (tenant,) = db.execute("SELECT tenant_id FROM gateway_api_keys").fetchone()
    assert tenant == "acme"

    # A database that cannot be made is named, with what to set, instead of a traceback.
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the data directory should be")
    refused = apikey(blocked, "create", "--tenant", "acme")
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert "cannot use the gateway's database" in refused.stderr
    assert "SHUTTLE_DATA_DIR" in refused.stderr


def test_a_revoked_keys_stream_tickets_are_refused(auth_stack: AuthStack, finished_a: str) -> None:
    made = apikey(auth_stack.data_dir, "create", "--tenant", "acme", "--name", "revoked soon")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    key_id = re.search(r"API key (key-[0-9a-f]+) ", made.stderr)
    assert key_id is not None, made.stderr
    with auth_stack.client(secret) as client:
        issued = client.post("/api/v1/stream/ticket", json={"workflow_id": finished_a}).json()
    status, frames = read_stream(auth_stack.url, issued["stream_url"])
    assert status == 200 and frames[-1].event == "STREAM_END"

    revoked = apikey(auth_stack.data_dir, "revoke", key_id.group(1))
    assert revoked.returncode == 0, revoked.stderr
    assert f"API key {key_id.group(1)} revoked" in revoked.stdout

    for url in (issued["stream_url"], issued["fim_stream_url"]):
        refused = httpx.get(f"{auth_stack.url}{url}", timeout=30)
        assert refused.status_code == 401, url
        assert refused.json()["error"]["message"] == (
            "the API key this stream ticket was issued for is revoked"
        )
    with auth_stack.client(secret) as client:
        assert client.get("/api/v1/tasks").status_code == 401
    # Other keys go on as before, and a key is revoked only once.
    with auth_stack.client(auth_stack.key_a) as client:
        assert client.get(f"/api/v1/tasks/{finished_a}").status_code == 200
    again = apikey(auth_stack.data_dir, "revoke", key_id.group(1))
    assert again.returncode == 1
    assert "no active API key" in again.stderr
