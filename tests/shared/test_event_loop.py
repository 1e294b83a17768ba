from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shuttle import event_loop
from shuttle.settings import SettingsError


async def _running_loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_where_it_is_installed() -> None:
    assert event_loop.loop_name("auto") == "uvloop"
    assert event_loop.run(_running_loop_module(), "auto").startswith("uvloop")


def test_asyncio_runs_on_asyncios_own_loop() -> None:
    assert event_loop.loop_name("asyncio") == "asyncio"
    assert event_loop.run(_running_loop_module(), "asyncio").startswith("asyncio")


def test_without_uvloop_auto_falls_back_and_uvloop_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # how Python marks a module unimportable
    assert event_loop.loop_name("auto") == "asyncio"
    assert event_loop.run(_running_loop_module(), "auto").startswith("asyncio")
    main = _running_loop_module()
    with pytest.raises(SettingsError, match="pip install uvloop"):
        event_loop.run(main, "uvloop")
    # Closed, not left to warn at exit that it was never awaited.
    assert inspect.getcoroutinestate(main) == inspect.CORO_CLOSED


@pytest.mark.parametrize("choice", ["uvloop", "asyncio"])
def test_a_service_serves_grpc_on_the_loop_it_was_given(choice: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "SHUTTLE_PLANNER_PORT": "0",
        "SHUTTLE_EVENT_LOOP": choice,
        "SHUTTLE_LOG_FORMAT": "json",
    }
    with subprocess.Popen(
        [sys.executable, "-m", "services.planner"], env=env, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stderr is not None
            for line in process.stderr:
                record = json.loads(line)
                if record["message"] == "listening":
                    break
            else:
                pytest.fail(f"the planner exited with {process.wait()} before listening")
            assert record["event_loop"] == choice
            with grpc.insecure_channel(f"127.0.0.1:{record['port']}") as channel:
                answer = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=30
                )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            process.terminate()
