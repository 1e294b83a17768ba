"""Entry point helper for ``python -m services.<name>``: settings, logs, serve."""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable

from shuttle import event_loop
from shuttle.grpc_server import ConnectionAge, GrpcService, PortInUseError, run_until_signalled
from shuttle.heap import freeze_startup_heap
from shuttle.logs import configure_logging
from shuttle.metrics import serve_metrics
from shuttle.settings import Settings, SettingsError, load_settings
from shuttle.telemetry import configure_tracing, shutdown_tracing

ServiceFactory = Callable[[Settings], Awaitable[GrpcService]]


def main(service: str, build: ServiceFactory) -> None:
    """Run one service process; configuration errors exit 2 with a one-line message."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"shuttle {service}: {exc}", file=sys.stderr)
        sys.exit(2)
    configure_logging(service, settings.log_level, settings.log_format)
    configure_tracing(settings, service)
    host, port = settings.grpc_bind(service)
    if settings.metrics_port:
        serve_metrics(host, settings.metrics_port)

    async def serve() -> None:
        grpc_service = await build(settings)
        grpc_service.connection_age = ConnectionAge(
            settings.grpc_max_connection_age_seconds,
            settings.grpc_max_connection_age_grace_seconds,
        )
        freeze_startup_heap(settings.gc_freeze)
        await run_until_signalled(
            grpc_service,
            host,
            port,
            f"SHUTTLE_{service.upper()}_PORT",
            settings.shutdown_grace_seconds,
        )

    try:
        event_loop.run(serve(), settings.event_loop)
    except SettingsError as exc:  # e.g. an unusable models file, found while building
        print(f"shuttle {service}: {exc}", file=sys.stderr)
        sys.exit(2)
    except PortInUseError as exc:
        logging.getLogger(service).error(str(exc))
        print(f"shuttle {service}: {exc}", file=sys.stderr)
        sys.exit(3)
    finally:
        shutdown_tracing()
