"""Many SSE clients in one asyncio process, on raw sockets, cheap enough to hold thousands.

Each client sends one HTTP/1.0 GET (so the body is not chunked) and reads the stream line by
line. An event whose payload carries a stamp (`bench.support.stamps`) gives a latency sample:
from that stamp to the moment its bytes arrived here.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Callable

from bench.support.stamps import STAMP


def raise_open_files_limit() -> int:
    """Lift this process's open-file limit to its hard limit (children inherit it)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class SseClient(asyncio.Protocol):
    def __init__(self, request: bytes, latencies: list[float]) -> None:
        self._request = request
        self._latencies = latencies
        self._buffer = b""
        self._headers_done = False
        self.status = 0
        self.frames = 0
        """`data:` lines received, stamped or not."""
        self.ended = False
        """STREAM_END received."""
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        lines = (self._buffer + data).split(b"\n")
        self._buffer = lines.pop()
        for line in lines:
            if not self._headers_done:
                if line.startswith(b"HTTP/"):
                    self.status = int(line.split()[1])
                elif line in (b"", b"\r"):
                    self._headers_done = True
                continue
            if line.startswith(b"data:"):
                self.frames += 1
                found = STAMP.search(line)
                if found is not None:
                    self._latencies.append((now - int(found.group(1))) / 1e6)
            elif line.startswith(b"event: STREAM_END"):
                self.ended = True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_clients(
    host: str, port: int, path: str, count: int, latencies: list[float], wave: int = 200
) -> list[SseClient]:
    """`count` clients on `path`, opened `wave` at a time so the listen backlog never fills."""
    loop = asyncio.get_running_loop()
    request = (
        f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    clients: list[SseClient] = []
    for start in range(0, count, wave):
        batch = await asyncio.gather(
            *(
                loop.create_connection(lambda: SseClient(request, latencies), host, port)
                for _ in range(min(wave, count - start))
            )
        )
        clients.extend(protocol for _, protocol in batch)
        # The next wave waits until this one has its response headers.
        await wait_until(lambda: all(c.status for c in clients), 120, "SSE response headers")
    refused = [c.status for c in clients if c.status != 200]
    if refused:
        raise RuntimeError(f"{len(refused)} SSE requests refused, e.g. HTTP {refused[0]}")
    return clients


async def wait_until(condition: Callable[[], bool], within: float, what: str) -> None:
    """Poll `condition` until it holds; a clear error after `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {within:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


def close_all(clients: list[SseClient]) -> None:
    for client in clients:
        client.close()
