"""The gateway application: routes, error handling, operations endpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway import stream, tasks
from gateway.backends import Backends
from gateway.errors import install_error_handlers
from shuttle.settings import Settings


def create_app(settings: Settings, backends: Backends | None = None) -> FastAPI:
    """`backends` defaults to clients built from `settings` when the app starts."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.backends = backends or Backends.connect(settings)
        try:
            yield
        finally:
            await app.state.backends.close()

    app = FastAPI(
        title="Shuttle",
        version="0.1.0",
        description="Submit tasks to agents and watch every step as an ordered event stream.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(tasks.router)
    app.include_router(stream.router)

    # One span per request (not per SSE chunk); probes and scrapes are left out.
    FastAPIInstrumentor.instrument_app(
        app, excluded_urls="healthz,readyz,metrics", exclude_spans=["send", "receive"]
    )

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: Request) -> Any:
        report = await request.app.state.backends.health()
        ready = all(state == "SERVING" for state in report.values())
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "backends": report},
            status_code=200 if ready else 503,
        )

    return app
