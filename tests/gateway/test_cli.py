"""The `shuttle` CLI against a running gateway with authentication."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.gateway.conftest import AuthStack
from tests.support.cutting_proxy import CuttingProxy

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
