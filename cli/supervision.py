"""`shuttle up`'s watch over its processes: a process that exits while the launch is up is
started again on its own port, after a delay that doubles with each exit in a row and starts
over once the process has stayed healthy for a while.

One pass (`Watch.check`) never waits: a process coming back is probed on later passes, so a
service that cannot start holds up neither the others' restarts nor a stop.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from cli.launcher import Supervisor


@dataclass(frozen=True)
class Backoff:
    first_seconds: float = 0.5
    most_seconds: float = 30.0
    steady_seconds: float = 60.0
    """Healthy this long, a process's next exit counts as its first again."""

    def delay(self, exits_in_a_row: int) -> float:
        return min(self.first_seconds * 2.0 ** (exits_in_a_row - 1), self.most_seconds)


@dataclass
class _Watched:
    exits: int = 0
    """Exits in a row, each without the process having been steady in between."""
    healthy_since: float | None = None
    """None while a process started again has not yet answered its health check."""
    restart_at: float | None = None
    """Set while the process is down: when to start it again."""


def exit_reason(returncode: int) -> str:
    """How a process ended, as an operator reads it: its code, or the signal that killed it."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"killed by {name}"


class Watch:
    """Restarts `supervisor`'s processes as they exit, reporting each restart on `out`."""

    def __init__(
        self,
        supervisor: Supervisor,
        out: TextIO,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
        tail_lines: int = 10,
    ) -> None:
        self._supervisor = supervisor
        self._out = out
        self._backoff = backoff or Backoff()
        self._clock = clock
        self._tail_lines = tail_lines
        self._watched: dict[str, _Watched] = {}
        self.stopped = False

    def stop(self) -> None:
        """No process is started again from now on (safe to call from a signal handler)."""
        self.stopped = True

    def check(self) -> None:
        """One pass over every process: note exits, start again those whose delay is over,
        probe those coming back."""
        for name, process in list(self._supervisor.processes.items()):
            if self.stopped:
                return
            now = self._clock()
            # A process first seen here was started (and found healthy) by the launch.
            watched = self._watched.setdefault(name, _Watched(healthy_since=now))
            if watched.restart_at is not None:
                if now >= watched.restart_at:
                    self._start_again(name, watched, now)
            elif process.poll() is not None:
                self._exited(name, process.pid, process.returncode, watched, now)
            elif watched.healthy_since is None and self._supervisor.healthy(name):
                watched.healthy_since = now
                self._say(f"shuttle: {name} is serving again (pid {process.pid})")

    def _exited(self, name: str, pid: int, code: int, watched: _Watched, now: float) -> None:
        since = watched.healthy_since
        if since is not None and now - since >= self._backoff.steady_seconds:
            watched.exits = 0
        watched.exits += 1
        delay = self._backoff.delay(watched.exits)
        watched.restart_at = now + delay
        tail = self._supervisor.tail(name, self._tail_lines)
        lines = "".join(f"\n    {line}" for line in tail.splitlines())
        self._say(
            f"shuttle: {name} (pid {pid}) exited ({exit_reason(code)}); starting it again in "
            f"{delay:g} s (exit {watched.exits} in a row). Last lines of "
            f"{self._supervisor.log_path(name)}:{lines or ' (nothing)'}"
        )

    def _start_again(self, name: str, watched: _Watched, now: float) -> None:
        if self.stopped:  # a stop that came in during this pass
            return
        watched.restart_at = None
        watched.healthy_since = None
        try:
            process = self._supervisor.spawn(self._supervisor.endpoint(name))
        except OSError as exc:  # e.g. its log file cannot be opened: try again later
            watched.exits += 1
            delay = self._backoff.delay(watched.exits)
            watched.restart_at = now + delay
            self._say(f"shuttle: could not start {name} ({exc}); trying again in {delay:g} s")
            return
        self._say(f"shuttle: starting {name} again (pid {process.pid})")

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()
