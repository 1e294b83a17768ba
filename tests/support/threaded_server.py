"""An ASGI app served by uvicorn on a free loopback port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Literal

import uvicorn


class ThreadedServer:
    def __init__(
        self,
        app: Any,
        *,
        lifespan: Literal["auto", "on", "off"] = "auto",
        name: str = "server",
        keep_alive_seconds: int = 5,
    ) -> None:
        self._app = app
        self._keep_alive_seconds = keep_alive_seconds
        self._lifespan = lifespan
        self._name = name
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self, timeout_seconds: float = 20) -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # As in the gateway: without it every reply waits ~40 ms on a delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app,
            log_level="warning",
            lifespan=self._lifespan,
            timeout_keep_alive=self._keep_alive_seconds,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_seconds
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self._name} did not start")
            time.sleep(0.01)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
