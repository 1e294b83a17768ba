"""`shuttle up` watches its processes: one killed is started again on its port and serves the
next task; one that cannot start is tried again after longer and longer delays; a stop stops
the watch first, so nothing is started again while the processes stop."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.launcher import busy_ports
from cli.replicas import endpoints
from cli.supervision import Backoff, Watch, exit_reason
from tests.support.shuttle_up import ShuttleUp
from tests.support.sse import read_stream
from tests.support.stack import settings_on_free_ports, start_stack

pytestmark = pytest.mark.integration

EXITED = r"shuttle: {name} \(pid {pid}\) exited \(([^)]*)\); starting it again in ([\d.]+) s"


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[tuple[ShuttleUp, str]]:
    """`shuttle up` on free ports with the demo model, and its gateway's URL."""
    settings = settings_on_free_ports(tmp_path)
    ports = {point.variable: str(point.port) for point in endpoints(settings)}
    env = {
        **ports,
        "SHUTTLE_AUTH": "off",
        "SHUTTLE_DATABASE_URL": "",
        "SHUTTLE_REDIS_URL": "",
        "OPENAI_BASE_URL": "",
        "OPENAI_API_KEY": "",
        "SHUTTLE_MODEL": "",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "",
        "OTEL_TRACES_EXPORTER": "none",
    }
    up = ShuttleUp(tmp_path, env)
    try:
        up.start()
        yield up, f"http://127.0.0.1:{settings.gateway_port}"
        # Whatever the test did, a stop ends every process and frees every port.
        assert up.stop(signal.SIGTERM) == 0, up.output()
        stopping = up.output().index("Stopping Shuttle")
        assert "again" not in up.output()[stopping:], up.output()[stopping:]
        assert busy_ports(endpoints(settings)) == []
    finally:
        up.close()


def answer(gateway: str, query: str) -> str:
    # Channels to a process that came back reconnect within a second (docs/operations.md):
    # until then a submission may be answered 503, which a client tries again.
    deadline = time.monotonic() + 30
    while (
        reply := httpx.post(f"{gateway}/api/v1/tasks", json={"query": query}, timeout=60)
    ).status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert reply.status_code == 201, reply.text
    path = f"/api/v1/stream/sse?workflow_id={reply.json()['workflow_id']}"
    status, frames = read_stream(gateway, path, timeout=120)
    assert status == 200
    assert [f.event for f in frames][-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"], frames
    return str(frames[-2].envelope["payload"]["result"])


def kill_and_see_it_back(up: ShuttleUp, name: str) -> str:
    """kill -9 the process of `name`; what the launch printed of it, once it serves again."""
    pid = up.child_pid(name)
    start = len(up.output())
    os.kill(pid, signal.SIGKILL)
    exited = up.wait_for(EXITED.format(name=name, pid=pid), start=start)
    assert exited.group(1) == "killed by SIGKILL"
    assert exited.group(2) == "0.5"  # its first exit: the shortest delay
    back = up.wait_for(rf"shuttle: {name} is serving again \(pid (\d+)\)", start=exited.end())
    assert int(back.group(1)) == up.child_pid(name) != pid
    return up.output()[exited.start() : back.end()]


def test_killed_executor_and_events_service_come_back_and_serve(
    launch: tuple[ShuttleUp, str],
) -> None:
    up, gateway = launch
    assert "12*7 = 84" in answer(gateway, "What is 12*7?")

    report = kill_and_see_it_back(up, "executor")
    # The report names the log and shows its last lines (the executor logged its start).
    assert "Last lines of " in report and "executor.log:" in report
    assert '"listening"' in report or "listening" in report
    assert "6*7 = 42" in answer(gateway, "What is 6*7?")

    kill_and_see_it_back(up, "events")
    assert "9*9 = 81" in answer(gateway, "What is 9*9?")


def squat(port: int, within: float = 5.0) -> socket.socket:
    """Listen on `port` as soon as it is free (a process that just died leaves it)."""
    deadline = time.monotonic() + within
    while True:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            sock.close()
            assert time.monotonic() < deadline, f"port {port} was never free"
            time.sleep(0.005)
            continue
        sock.listen()
        return sock


def test_a_process_that_cannot_start_is_tried_again_after_growing_delays(
    launch: tuple[ShuttleUp, str], tmp_path: Path
) -> None:
    up, gateway = launch
    port = int(up.wait_for(r"planner\s+127\.0\.0\.1:(\d+)").group(1))
    pid = up.child_pid("planner")
    start = len(up.output())
    os.kill(pid, signal.SIGKILL)
    # Another process takes the port before the planner is started again (0.5 s later).
    squatter = squat(port)
    try:
        exits: list[tuple[str, str]] = []
        while len(exits) < 5:
            exited = up.wait_for(EXITED.format(name="planner", pid=r"\d+"), start=start)
            exits.append((exited.group(1), exited.group(2)))
            start = exited.end()
        # Each attempt failed on the port (exit code 3, its log saying why) and the next one
        # waited twice as long.
        reasons, delays = zip(*exits, strict=True)
        assert delays == ("0.5", "1", "2", "4", "8"), delays
        assert reasons == ("killed by SIGKILL", *["exit code 3"] * 4), reasons
        assert "cannot listen on 127.0.0.1:" in up.output()
        assert "exit 5 in a row" in up.output()
    finally:
        squatter.close()
    # Once the port is free again, the next attempt serves.
    up.wait_for(r"shuttle: planner is serving again", timeout=90, start=start)
    assert "2*3 = 6" in answer(gateway, "What is 2*3?")
    attempts = re.findall(r"shuttle: starting planner again", up.output())
    assert len(attempts) == 5


class Clock:
    """The watch's time, moved on by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_to_their_cap_and_start_over_once_a_process_was_steady(
    tmp_path: Path,
) -> None:
    backoff = Backoff()
    assert [backoff.delay(n) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert exit_reason(3) == "exit code 3" and exit_reason(-9) == "killed by SIGKILL"

    stack = start_stack(tmp_path)
    clock, out = Clock(), io.StringIO()
    watch = Watch(stack.supervisor, out, clock=clock)
    try:
        watch.check()  # every process seen, steady from now

        def kill_and_restart() -> str:
            """kill -9 the planner; the delay the watch chose, once it serves again."""
            stack.supervisor.processes["planner"].kill()
            stack.supervisor.processes["planner"].wait()
            seen = len(out.getvalue())
            watch.check()
            delay = re.findall(r"starting it again in ([\d.]+) s", out.getvalue()[seen:])
            clock.now += float(delay[0])
            watch.check()
            while "planner is serving again" not in out.getvalue()[seen:]:
                time.sleep(0.1)
                watch.check()
            return str(delay[0])

        # Killed again soon after coming back: the delay doubles.
        assert [kill_and_restart(), kill_and_restart()] == ["0.5", "1"]
        # Healthy for longer than steady_seconds: its next exit counts as its first.
        clock.now += backoff.steady_seconds
        assert kill_and_restart() == "0.5"
        # A stopped watch starts nothing again.
        watch.stop()
        stack.supervisor.processes["planner"].kill()
        stack.supervisor.processes["planner"].wait()
        clock.now += 60
        watch.check()
        watch.check()
        assert stack.supervisor.processes["planner"].poll() is not None
    finally:
        stack.stop()
