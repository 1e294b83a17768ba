"""The `shuttle` command: `shuttle run` starts the whole system on this machine."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType

from shuttle.launcher import LaunchError, Supervisor, endpoints
from shuttle.settings import Settings, SettingsError, load_settings


def banner(settings: Settings, log_dir: str) -> str:
    gateway = f"http://{settings.gateway_host}:{settings.gateway_port}"
    rows = "\n".join(
        f"  {p.name:<9} {p.host}:{p.port}"
        + ("   HTTP API + SSE" if p.name == "gateway" else "   gRPC")
        for p in endpoints(settings)
    )
    if settings.uses_demo_model:
        model = (
            "offline DEMO model (deterministic, arithmetic only; answers are labelled "
            "[demo model]).\n"
            "            Set OPENAI_BASE_URL and OPENAI_API_KEY to use a real model."
        )
    else:
        model = f"{settings.model or 'endpoint default'} at {settings.openai_base_url or 'OpenAI'}"
    extract = "python3 -c 'import json,sys; print(json.load(sys.stdin)[\"workflow_id\"])'"
    storage = settings.database_url or f"SQLite at {settings.data_dir / 'shuttle.db'}"
    return f"""
Shuttle is running.
{rows}
  storage   {storage}; hot tier in-process
  model     {model}
  logs      {log_dir}/<service>.log

Try it:
  curl -s -X POST {gateway}/api/v1/tasks -H 'Content-Type: application/json' \\
       -d '{{"query": "What is 12*7?"}}'
  curl -N "{gateway}/api/v1/stream/sse?workflow_id=<workflow_id from the reply>"

Or both at once:
  wf=$(curl -s -X POST {gateway}/api/v1/tasks -H 'Content-Type: application/json' \\
       -d '{{"query": "What is 12*7?"}}' | {extract})
  curl -N "{gateway}/api/v1/stream/sse?workflow_id=$wf"

Press Ctrl-C to stop.
"""


def run(settings: Settings) -> int:
    log_dir = settings.data_dir / "logs"
    supervisor = Supervisor(settings, log_dir)
    stopping = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    print("Starting Shuttle: events, tools, planner, executor, gateway …", flush=True)
    try:
        supervisor.start()
    except LaunchError as exc:
        print(f"shuttle: could not start:\n{exc}", file=sys.stderr)
        return 1
    print(banner(settings, str(log_dir)), flush=True)
    try:
        while not stopping:
            crashed = supervisor.crashed()
            if crashed:
                for name in crashed:
                    print(
                        f"shuttle: {name} stopped unexpectedly:\n{supervisor.tail(name)}",
                        file=sys.stderr,
                    )
                return 1
            time.sleep(0.5)
        print("\nStopping Shuttle …", flush=True)
        return 0
    finally:
        supervisor.stop()
        print("Stopped.", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="shuttle", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="start all services on this machine (embedded defaults)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.exit(f"shuttle: {exc}")
    if args.command == "run":
        sys.exit(run(settings))


if __name__ == "__main__":
    main()
