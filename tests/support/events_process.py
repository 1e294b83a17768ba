"""`python -m services.events` in its own process, killable and restartable on the same port
and database, with its Prometheus metrics on a port of its own: what the server counted."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from shuttle.settings import child_environment
from tests.support.processes import stop_process, wait_until_serving
from tests.support.stack import free_ports

STREAM_BATCHES = "/shuttle.v1.EventService/StreamBatches"


class EventsProcess:
    def __init__(self, data_dir: Path, variables: Mapping[str, str] | None = None) -> None:
        """`variables` are added to (or override) the process's SHUTTLE_* settings."""
        self.port, self.metrics_port = free_ports(2)
        self._data_dir = data_dir
        self._variables = dict(variables or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._starts = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EventsProcess:
        self._starts += 1
        variables = {
            "SHUTTLE_EVENTS_HOST": "127.0.0.1",
            "SHUTTLE_EVENTS_PORT": str(self.port),
            "SHUTTLE_METRICS_PORT": str(self.metrics_port),
            "SHUTTLE_DATA_DIR": str(self._data_dir),
            "SHUTTLE_DATABASE_URL": "",
            "SHUTTLE_REDIS_URL": "",
            "SHUTTLE_LOG_FORMAT": "text",
            "OTEL_TRACES_EXPORTER": "none",
            **self._variables,
        }
        log = (self._data_dir / f"events-{self._starts}.log").open("wb")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "services.events"],
            env=child_environment(variables),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        wait_until_serving(self._process, self.port, 30)
        return self

    @property
    def pid(self) -> int:
        assert self._process is not None, "the process is not running"
        return self._process.pid

    def kill(self) -> None:
        """SIGKILL: nothing is flushed or closed."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None

    def finished_streams(self) -> int:
        """StreamBatches calls this process has finished (ended, failed or cancelled)."""
        return self.finished_calls(STREAM_BATCHES)

    def finished_calls(self, method: str, code: str = "") -> int:
        """Calls of `method` (a full name, /package.Service/Method) this process has
        finished, with status `code` when given."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name == "shuttle_grpc_server_handling_seconds_count"
                    and sample.labels.get("method") == method
                    and (not code or sample.labels.get("code") == code)
                ):
                    total += sample.value
        return int(total)

    def wait_for_finished_streams(self, count: int, within: float = 30) -> int:
        """Poll until at least `count` calls have finished; how many have."""
        deadline = time.monotonic() + within
        while (finished := self.finished_streams()) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return finished


@contextlib.contextmanager
def events_replicas(
    database_url: str, redis_url: str, redis_prefix: str, directory: Path, count: int = 2
) -> Iterator[list[EventsProcess]]:
    """`count` events processes sharing one database and one Redis, each in its own
    directory under `directory`; stopped on exit."""
    shared = {
        "SHUTTLE_DATABASE_URL": database_url,
        "SHUTTLE_REDIS_URL": redis_url,
        "SHUTTLE_REDIS_KEY_PREFIX": redis_prefix,
    }
    started: list[EventsProcess] = []
    try:
        for index in range(count):
            (directory / f"replica-{index}").mkdir()
            started.append(EventsProcess(directory / f"replica-{index}", shared).start())
        yield started
    finally:
        for replica in started:
            replica.stop()
