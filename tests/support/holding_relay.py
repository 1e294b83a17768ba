"""A loopback TCP relay whose replies can be held back and then dropped: what a client has
not received when its server dies is gone, whatever the server had sent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any


class HoldingRelay:
    """Relays each connection to `upstream_port`. `hold()` stops passing the upstream's bytes
    on; `drop()` closes every connection without them and lets new ones flow again."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._connections: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="holding relay")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> HoldingRelay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")
        return self

    def stop(self) -> None:
        self.drop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def hold(self) -> None:
        self._call(self._hold())

    def drop(self) -> None:
        self._call(self._drop())

    def _call(self, work: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=10)

    async def _hold(self) -> None:
        self._flowing.clear()

    async def _drop(self) -> None:
        connections, self._connections = self._connections, set()
        for connection in connections:
            connection.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        self._flowing.set()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        except OSError:
            client_w.close()
            self._connections.discard(task)
            return
        try:
            await asyncio.gather(
                self._pump(client_r, up_w, holdable=False),
                self._pump(up_r, client_w, holdable=True),
            )
        finally:
            up_w.close()
            client_w.close()
            self._connections.discard(task)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, holdable: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if holdable:
                    # Held bytes wait here until `drop` cancels the connection with them.
                    await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
