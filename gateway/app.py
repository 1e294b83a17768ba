"""The gateway application: routes, auth state, error handling, operations endpoints."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.middleware.cors import CORSMiddleware

from gateway.backends import Backends
from gateway.edge.body_limit import BodyLimit
from gateway.edge.grpc_web import GrpcWebProxy
from gateway.edge.loopback_host import LoopbackHostOnly
from gateway.edge.rate_limit import RateLimiter
from gateway.edge.tickets import TicketSigner
from gateway.errors import install_error_handlers
from gateway.fanout import FanOut
from gateway.routes import (
    ag_ui,
    artifacts,
    control,
    openai_compat,
    openai_responses,
    sessions,
    stream,
    tasks,
)
from gateway.routes.json_response import Utf8JSONResponse
from gateway.routes.mcp_server import install_mcp
from gateway.routes.openapi import install_openapi
from gateway.stores.db import create_schema
from gateway.stores.keys import KeyStore
from gateway.stores.sessions import SessionStore
from gateway.stores.task_index import TaskIndex
from shuttle.db import create_engine
from shuttle.settings import Settings
from shuttle.sqlite_in_place import small_writes_for

log = logging.getLogger("gateway")

STATIC_DIR = Path(__file__).parent / "static"

CORS_HEADERS = [
    "authorization",
    "x-api-key",
    "content-type",
    "idempotency-key",
    "last-event-id",
    "x-grpc-web",
    "x-user-agent",
    "grpc-timeout",
    "connect-protocol-version",
    "connect-timeout-ms",
    "mcp-session-id",
    "mcp-protocol-version",
]
CORS_EXPOSED = [
    "grpc-status",
    "grpc-message",
    "grpc-status-details-bin",
    "retry-after",
    "location",
    "mcp-session-id",
]


def create_app(settings: Settings, backends: Backends | None = None) -> FastAPI:
    """`backends` defaults to clients built from `settings` when the app starts."""
    signer, generated = TicketSigner.from_setting(
        settings.ticket_secret, settings.ticket_ttl_seconds
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(settings.sqlalchemy_url)
        await create_schema(engine)
        app.state.keys = KeyStore(engine)
        writes = small_writes_for(engine)
        app.state.task_index = TaskIndex(engine, settings.idempotency_reservation_seconds, writes)
        app.state.sessions = SessionStore(engine, settings.session_history_max_bytes)
        app.state.backends = backends or Backends.connect(settings)
        app.state.fanout = FanOut(
            app.state.backends.events,
            stream.typed_frame,
            buffer_bytes=settings.sse_feed_buffer_bytes,
            retry_seconds=settings.events_retry_seconds,
            seconds_per_watcher=settings.sse_fanout_seconds_per_client,
        )
        if generated:
            log.info(
                "stream tickets are signed with a key generated for this process "
                "(set SHUTTLE_TICKET_SECRET to share one across replicas and restarts)"
            )
        try:
            async with app.state.mcp_sessions():
                yield
        finally:
            await app.state.fanout.close()
            await app.state.backends.close()
            await writes.close()
            await engine.dispose()

    app = FastAPI(
        title="Shuttle",
        version="0.1.0",
        description="Submit tasks to agents and watch every step as an ordered event stream.",
        lifespan=lifespan,
        default_response_class=Utf8JSONResponse,
    )
    app.state.settings = settings
    app.state.tickets = signer
    app.state.rate_limiter = RateLimiter(
        settings.rate_limit, settings.redis_url, settings.redis_key_prefix
    )
    app.state.grpc_web = GrpcWebProxy()
    install_error_handlers(app)
    install_openapi(app)
    app.add_middleware(BodyLimit, limit=settings.gateway_max_body_bytes)
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=CORS_HEADERS,
            expose_headers=CORS_EXPOSED,
            max_age=600,
        )
    app.add_middleware(LoopbackHostOnly, auth=settings.auth)  # outermost: before CORS too
    app.include_router(tasks.router)
    app.include_router(artifacts.router)
    app.include_router(sessions.router)
    app.include_router(stream.router)
    app.include_router(control.router)
    app.include_router(openai_compat.router)
    app.include_router(openai_responses.router)
    app.include_router(ag_ui.router)
    app.state.mcp_sessions = install_mcp(app)
    app.add_route(
        "/shuttle.v1.{service}/{method}",
        app.state.grpc_web.handle,
        methods=["POST"],
        include_in_schema=False,
    )
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    # One span per request (not per SSE chunk); probes and scrapes are left out.
    FastAPIInstrumentor.instrument_app(
        app, excluded_urls="healthz,readyz,metrics", exclude_spans=["send", "receive"]
    )

    if not settings.metrics_port:  # else served on that port alone (gateway/__main__.py)

        @app.get("/metrics", include_in_schema=False)
        async def metrics() -> Response:
            return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/api/v1/config", tags=["operations"])
    async def console_config() -> dict[str, Any]:
        """What the web console needs to know before it has a key."""
        return {"auth": settings.auth.value, "version": app.version}

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"])
    async def readyz(request: Request) -> Any:
        report = await request.app.state.backends.health()
        ready = all(state == "SERVING" for state in report.values())
        return JSONResponse(
            {"status": "ready" if ready else "not_ready", "backends": report},
            status_code=200 if ready else 503,
        )

    return app
