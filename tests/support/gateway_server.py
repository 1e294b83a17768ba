"""The gateway app served by real uvicorn in a background thread, for tests that need to
look inside the running app (its state) or give it settings of their own."""

from __future__ import annotations

from fastapi import FastAPI

from gateway.app import create_app
from shuttle.settings import Settings
from tests.support.threaded_server import ThreadedServer


class GatewayServer:
    def __init__(self, settings: Settings) -> None:
        self.app: FastAPI = create_app(settings)
        self._threaded = ThreadedServer(self.app, name="gateway")
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayServer:
        self.port = self._threaded.start()
        return self

    def stop(self) -> None:
        self._threaded.stop()
