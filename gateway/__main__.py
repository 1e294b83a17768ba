"""`python -m gateway`: serve the HTTP API with uvicorn."""

from __future__ import annotations

import logging
import signal
import socket
import sys

import uvicorn

from gateway.app import create_app
from shuttle.event_loop import loop_name
from shuttle.heap import freeze_startup_heap
from shuttle.logs import configure_logging
from shuttle.metrics import serve_metrics
from shuttle.settings import AuthMode, SettingsError, is_loopback, load_settings
from shuttle.telemetry import configure_tracing, shutdown_tracing


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this. Without it, uvicorn's separate header and body writes
    # meet Nagle's algorithm and the client's delayed ACK: ~40 ms added to every response.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


def main() -> None:
    try:
        settings = load_settings()
        loop = loop_name(settings.event_loop)
    except SettingsError as exc:
        sys.exit(f"shuttle gateway: {exc}")
    configure_logging("gateway", settings.log_level, settings.log_format)
    configure_tracing(settings, "gateway")
    log = logging.getLogger("gateway")
    host, port = settings.gateway_host, settings.gateway_port
    if settings.auth is AuthMode.OFF and not is_loopback(host):
        sys.exit(
            f"shuttle gateway: refusing to listen on {host} without authentication; "
            "set SHUTTLE_AUTH=required or bind SHUTTLE_GATEWAY_HOST to 127.0.0.1"
        )
    if settings.gateway_replicas > 1 and not settings.ticket_secret:
        sys.exit(
            f"shuttle gateway: {settings.gateway_replicas} gateway replicas need one "
            "SHUTTLE_TICKET_SECRET shared by all of them (a stream ticket from one must pass on "
            "another); set it, e.g. to the output of `openssl rand -hex 32`"
        )
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        sys.exit(
            f"shuttle gateway: cannot listen on {host}:{port} ({exc.strerror}); "
            "set SHUTTLE_GATEWAY_PORT to another port or stop the process using it"
        )
    if settings.metrics_port:
        # Its own port, so the metrics need not be reachable where the API is.
        try:
            serve_metrics(host, settings.metrics_port)
        except OSError as exc:
            sys.exit(
                f"shuttle gateway: cannot serve metrics on {host}:{settings.metrics_port} "
                f"({exc.strerror}); set SHUTTLE_METRICS_PORT to another port, or 0 to serve "
                "them at /metrics on the gateway's port"
            )
        log.info("metrics at http://%s:%d/metrics", host, settings.metrics_port)
    if settings.auth is AuthMode.OFF:
        log.info(
            "authentication is off (loopback only): every caller is tenant %r",
            settings.default_tenant,
        )
    else:
        log.info("authentication required: create keys with `shuttle apikey create --tenant NAME`")
    config = uvicorn.Config(
        create_app(settings),
        loop=loop,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds),
    )
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, restores the previous handlers and then
    # re-raises the signal. With these no-op handlers in place, that re-raise does not kill
    # the process, so a clean stop exits 0 as the other services do.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    freeze_startup_heap(settings.gc_freeze)  # the app and every module it imported
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        shutdown_tracing()


if __name__ == "__main__":
    main()
