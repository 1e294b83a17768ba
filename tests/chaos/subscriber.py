"""An SSE subscriber that behaves like a browser's EventSource: it resumes with
Last-Event-ID after any cut, refusal or server error until it has seen STREAM_END.

It can also cut its own connection after chosen events (a flaky network) and stall (read
nothing) until released, so the same client serves every fault.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.sse import parse_frames

RECONNECT_FIRST_SECONDS = 0.05
RECONNECT_MAX_SECONDS = 1.0


@dataclass
class Stall:
    """Stop reading after `after_events` events until `released` is set."""

    after_events: int
    released: asyncio.Event = field(default_factory=asyncio.Event)
    stalled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the subscriber has stopped reading."""
    resumed_at: float = 0.0
    caught_up_seconds: float = 0.0


@dataclass
class Subscription:
    """Everything one subscriber received, in order, and how its connections went."""

    workflow_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    cuts: int = 0
    errors: list[str] = field(default_factory=list)
    ended: bool = False
    resume_waits: list[float] = field(default_factory=list)
    """Seconds from losing a connection to the server accepting the next one (200)."""

    @property
    def seqs(self) -> list[int]:
        return [int(event["seq"]) for event in self.events]

    @property
    def last_seq(self) -> int:
        return int(self.events[-1]["seq"]) if self.events else 0


async def follow(
    client: httpx.AsyncClient,
    sub: Subscription,
    *,
    cut_after: Collection[int] = (),
    stall: Stall | None = None,
    give_up_after_seconds: float = 120.0,
    fallbacks: Sequence[httpx.AsyncClient] = (),
) -> Subscription:
    """Read `sub`'s workflow as typed SSE to STREAM_END, resuming after every interruption.

    `cut_after`: drop the connection right after receiving the Nth event (1-based count of
    events received so far), then resume with Last-Event-ID. `fallbacks`: other gateways,
    tried in turn after a connection fails or ends without STREAM_END (a lost gateway).
    """
    clients = [client, *fallbacks]
    deadline = time.monotonic() + give_up_after_seconds
    backoff = RECONNECT_FIRST_SECONDS
    lost_at: float | None = None
    while not sub.ended and time.monotonic() < deadline:
        headers = {"Last-Event-ID": str(sub.last_seq)} if sub.events else {}
        try:
            async with client.stream(
                "GET", f"/api/v1/stream/sse?workflow_id={sub.workflow_id}", headers=headers
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    sub.errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                else:
                    sub.connections += 1
                    if lost_at is not None:
                        sub.resume_waits.append(time.monotonic() - lost_at)
                        lost_at = None
                    cut = await _read(response, sub, cut_after, stall)
                    if cut:
                        sub.cuts += 1
                        lost_at = time.monotonic()
                        backoff = RECONNECT_FIRST_SECONDS
                        continue  # a client that cut itself reconnects at once
        except httpx.HTTPError as exc:
            sub.errors.append(f"{type(exc).__name__}: {exc}")
        if sub.ended:
            break
        clients.append(clients.pop(0))
        client = clients[0]
        lost_at = lost_at or time.monotonic()
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, RECONNECT_MAX_SECONDS)
    return sub


async def _read(
    response: httpx.Response,
    sub: Subscription,
    cut_after: Collection[int],
    stall: Stall | None,
) -> bool:
    """Frames until the server closes, STREAM_END, or a planned cut (then True)."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if line != "":
            lines.append(line)
            continue
        frames, _ = parse_frames(lines)
        lines = []
        for frame in frames:
            if frame.event == "error":
                # The server could not go on (e.g. the events service went away): resume.
                sub.errors.append(f"stream error: {frame.data[:200]}")
                return False
            if frame.id is None:
                continue
            sub.events.append(frame.envelope)
            if frame.event == "STREAM_END":
                sub.ended = True
                if stall is not None and stall.resumed_at:
                    stall.caught_up_seconds = time.monotonic() - stall.resumed_at
                return False
            if stall is not None and len(sub.events) == stall.after_events:
                stall.stalled.set()
                await stall.released.wait()
                stall.resumed_at = time.monotonic()
            if len(sub.events) in cut_after:
                return True
    return False
