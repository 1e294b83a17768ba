"""Small SSE readers for tests: frames as the wire carries them."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Frame:
    id: str | None
    event: str | None
    data: str
    retry: int | None

    @property
    def envelope(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.data)
        return parsed


def parse_frames(lines: list[str]) -> tuple[list[Frame], int]:
    """Frames in `lines` (blank-line separated) and how many comment lines (pings) there were."""
    frames: list[Frame] = []
    comments = 0
    fields: dict[str, list[str]] = {}
    for line in [*lines, ""]:
        if line == "":
            if fields:
                retry = fields.get("retry", [None])[-1]
                frames.append(
                    Frame(
                        id=fields.get("id", [None])[-1],
                        event=fields.get("event", [None])[-1],
                        data="\n".join(fields.get("data", [])),
                        retry=int(retry) if retry else None,
                    )
                )
            fields = {}
        elif line.startswith(":"):
            comments += 1
        else:
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
    return frames, comments


def read_stream(
    base_url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 60.0
) -> tuple[int, list[Frame]]:
    """GET an SSE route and read it until the server closes it."""
    with (
        httpx.Client(base_url=base_url, timeout=timeout) as client,
        client.stream("GET", path, headers=headers or {}) as response,
    ):
        if response.status_code != 200:
            response.read()
            return response.status_code, []
        lines = [line.rstrip("\r") for line in response.iter_lines()]
    frames, _ = parse_frames(lines)
    return 200, frames


class LiveStream:
    """Reads an SSE route in a background thread until the server closes it, noting when each
    frame arrived (time.monotonic), so a test can watch a run live and time its end."""

    def __init__(self, base_url: str, path: str, timeout: float = 120.0) -> None:
        self.frames: list[tuple[float, Frame]] = []
        self.status = 0
        self._base_url, self._path, self._timeout = base_url, path, timeout
        self._thread = threading.Thread(target=self._read, daemon=True, name="sse-reader")
        self._thread.start()

    def _read(self) -> None:
        with (
            httpx.Client(base_url=self._base_url, timeout=self._timeout) as client,
            client.stream("GET", self._path) as response,
        ):
            self.status = response.status_code
            lines: list[str] = []
            for line in response.iter_lines():
                line = line.rstrip("\r")
                if line:
                    lines.append(line)
                    continue
                frames, _ = parse_frames(lines)
                lines = []
                self.frames += [(time.monotonic(), frame) for frame in frames]

    def seen(self, event_type: str) -> bool:
        return any(frame.event == event_type for _, frame in self.frames)

    def wait_for(self, event_type: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.seen(event_type):
            assert self._thread.is_alive(), f"the stream closed without {event_type}"
            assert time.monotonic() < deadline, f"no {event_type} on the stream"
            time.sleep(0.05)

    def join(self, timeout: float = 120.0) -> list[Frame]:
        """Wait for the server to close the stream; its frames."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the stream did not end"
        return [frame for _, frame in self.frames]

    def arrived(self, event_type: str) -> float:
        return next(at for at, frame in self.frames if frame.event == event_type)
