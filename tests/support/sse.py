"""A small SSE reader for tests: frames as the wire carries them."""

from __future__ import annotations

import json
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
