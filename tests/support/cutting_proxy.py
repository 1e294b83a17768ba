"""A loopback HTTP proxy that cuts the first SSE response after a few frames, to test that
clients resume where they were."""

from __future__ import annotations

import asyncio
import threading


class CuttingProxy:
    def __init__(self, upstream_port: int, frames_before_cut: int = 3) -> None:
        self._upstream_port = upstream_port
        self._frames_before_cut = frames_before_cut
        self.cuts = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CuttingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        # Relays still open are cancelled and awaited on the loop, so none is left to be
        # closed by the garbage collector after the loop is gone.
        asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _shut_down(self) -> None:
        self._server.close()
        relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for relay in relays:
            relay.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        head = await client_r.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await client_r.readexactly(length) if length else b""
        # One request per connection keeps the relay simple.
        head = head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
        cut = b"/stream" in head.split(b"\r\n", 1)[0] and self.cuts == 0
        if cut:
            self.cuts += 1
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        up_w.write(head + body)
        await up_w.drain()
        frames = 0
        try:
            while chunk := await up_r.read(65536):
                if cut:
                    # Pass on only up to the end of the Nth frame (the response headers end in
                    # a blank line too), then drop the client mid-stream as a flaky network
                    # would. sse-starlette separates frames with CRLF CRLF.
                    end = 0
                    while frames < self._frames_before_cut + 1:
                        found = chunk.find(b"\r\n\r\n", end)
                        if found < 0:
                            break
                        end, frames = found + 4, frames + 1
                    if frames > self._frames_before_cut:
                        client_w.write(chunk[:end])
                        await client_w.drain()
                        break
                client_w.write(chunk)
                await client_w.drain()
        finally:
            up_w.close()
            client_w.close()
