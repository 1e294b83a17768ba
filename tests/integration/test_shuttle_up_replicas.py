"""`shuttle up --replicas` as an operator runs it: one command, every replica up and named in
the banner (each with a metrics port of its own), a run through either gateway, Ctrl-C
stopping them all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.launcher import busy_ports
from cli.replicas import endpoints, parse_spec
from tests.chaos.model import ChaosModel
from tests.support.replicated_stack import free_settings, model_environment, shared_state
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import read_stream

pytestmark = pytest.mark.integration

SPEC = "executor=2,gateway=2"


@pytest.fixture
def model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI(ChaosModel(tool_steps=1)).start()
    yield server
    server.stop()


def wait_for_banner(process: subprocess.Popen[bytes], output: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = output.read_text(errors="replace")
        if "Press Ctrl-C to stop." in text:
            return text
        if process.poll() is not None:
            pytest.fail(f"shuttle up exited with {process.returncode}:\n{text}")
        time.sleep(0.2)
    pytest.fail(f"shuttle up printed no banner in {timeout} s:\n{output.read_text()}")


def test_shuttle_up_with_replicas_serves_through_each_gateway_and_stops_them_all(
    tmp_path: Path, model: ScriptedOpenAI
) -> None:
    counts = parse_spec(SPEC)
    settings = free_settings(tmp_path, counts, metrics=True)
    points = endpoints(settings, counts)
    ports = {p.variable: str(p.port) for p in points if p.replica == 1}
    ports["SHUTTLE_METRICS_PORT"] = str(settings.metrics_port)
    output = tmp_path / "shuttle-up.out"
    with shared_state() as shared, output.open("wb") as out:
        env = {
            **os.environ,
            **model_environment(model.base_url),
            **shared.environment,
            **ports,
            "SHUTTLE_DATA_DIR": str(tmp_path),
            "SHUTTLE_AUTH": "off",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "up", "--replicas", SPEC],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            banner = wait_for_banner(process, output, timeout=120)
            rows = {tuple(line.split()[:2]) for line in banner.splitlines()}
            for point in points:
                assert (point.name, f"{point.host}:{point.port}") in rows, banner

            first, second = (f"http://127.0.0.1:{p.port}" for p in points if p.service == "gateway")
            reply = httpx.post(f"{second}/api/v1/tasks", json={"query": "what is 6*7?"}, timeout=30)
            assert reply.status_code == 201, reply.text
            workflow_id = reply.json()["workflow_id"]
            status, frames = read_stream(
                first, f"/api/v1/stream/sse?workflow_id={workflow_id}", timeout=60
            )
            assert status == 200
            assert [f.event for f in frames][-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
            assert (tmp_path / "logs" / "executor-2.log").exists()
            assert (tmp_path / "logs" / "gateway-2.log").exists()
            # Each process serves its metrics on a port of its own.
            for point in points:
                assert f"metrics on port {point.metrics_port}" in banner
                scraped = httpx.get(f"http://127.0.0.1:{point.metrics_port}/metrics", timeout=10)
                assert scraped.status_code == 200, point.name

            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=60) == 0, output.read_text()
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)
        # Every replica stopped with the launch: each one's port is free again.
        assert busy_ports(points) == []
