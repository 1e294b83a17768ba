"""`shuttle up` as an operator runs it: one command in a process of its own, its output (stdout
and stderr together) in a file the test reads as it grows, its children found by module."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from cli.launcher import MODULES

BANNER_END = "Press Ctrl-C to stop."


class ShuttleUp:
    def __init__(self, data_dir: Path, env: Mapping[str, str], *args: str) -> None:
        self.output_path = data_dir / "shuttle-up.out"
        self._env = {**os.environ, **env, "SHUTTLE_DATA_DIR": str(data_dir)}
        self._args = args
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self._process is not None, "shuttle up was not started"
        return self._process

    def start(self, timeout: float = 120) -> ShuttleUp:
        """Start it and return once its banner says every process is up."""
        with self.output_path.open("wb") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "cli", "up", *self._args],
                env=self._env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.wait_for(re.escape(BANNER_END), timeout)
        return self

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 60, start: int = 0) -> re.Match[str]:
        """The first match of `pattern` in the output from offset `start`, once it appears."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.compile(pattern).search(self.output(), start)
            if found:
                return found
            if self.process.poll() is not None:
                raise AssertionError(
                    f"shuttle up exited ({self.process.returncode}) before printing "
                    f"{pattern!r}:\n{self.output()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in {timeout} s:\n{self.output()}")
            time.sleep(0.05)

    def children(self) -> dict[int, list[str]]:
        """The launch's running children: each one's command line by pid."""
        found: dict[int, list[str]] = {}
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes()
                except FileNotFoundError:  # gone since
                    continue
                found[int(pid)] = [part.decode() for part in command.split(b"\0") if part]
        return found

    def child_pid(self, name: str) -> int:
        """The pid of the running process of service `name` (`events`, …, `gateway`)."""
        wanted = ["-m", MODULES[name]]
        for pid, command in self.children().items():
            if command[1:3] == wanted:
                return pid
        raise AssertionError(f"shuttle up has no {name} process running:\n{self.output()}")

    def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 60) -> int:
        """Send `sig` (Ctrl-C by default); the launch's exit code."""
        self.process.send_signal(sig)
        return self.process.wait(timeout)

    def close(self) -> None:
        """Make sure it is gone, children included (a failed test's launch too)."""
        if self._process is None or self._process.poll() is not None:
            return
        children = self.children()
        self._process.terminate()
        try:
            self._process.wait(60)
        except subprocess.TimeoutExpired:
            for pid in children:  # in sessions of their own: killing the launch leaves them
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._process.kill()
            self._process.wait()
