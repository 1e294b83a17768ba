"""The `shuttle` command.

`shuttle up` starts the whole system on this machine; `run`, `events`, `tasks` and `approve`
talk to a running gateway (SHUTTLE_GATEWAY_URL, key in SHUTTLE_API_KEY); `apikey create` and
`apikey revoke` work straight on the gateway's database (SHUTTLE_DATABASE_URL), making it
first if it does not exist yet.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

from cli.launcher import LaunchError, Supervisor
from cli.replicas import Endpoint, ReplicaSpecError, check_shared_state, parse_spec
from cli.supervision import Watch
from shuttle.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from gateway.stores.keys import KeyStore

T = TypeVar("T")
# How often `shuttle up` looks at its processes.
WATCH_SECONDS = 0.2


def banner(settings: Settings, points: list[Endpoint], log_dir: str, token_file: str) -> str:
    gateway = f"http://{settings.gateway_host}:{settings.gateway_port}"
    width = max(9, *(len(p.name) for p in points))
    rows = "\n".join(
        f"  {p.name:<{width}} {p.host}:{p.port}"
        + ("   HTTP API + SSE" if p.service == "gateway" else "   gRPC")
        + (f"; metrics on port {p.metrics_port}" if p.metrics_port else "")
        for p in points
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
    hot_tier = "in Redis (SHUTTLE_REDIS_URL)" if settings.redis_url else "in-process"
    return f"""
Shuttle is running.
{rows}
  storage   {storage}; hot tier {hot_tier}
  model     {model}
  logs      {log_dir}/<service>.log (replicas: <service>-2.log, …)
  gRPC key  {token_file} (grpcurl -H "authorization: Bearer $(cat {token_file})" …)
  console   {gateway}/   (auth {settings.auth.value}; CLI: shuttle run "What is 12*7?")

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


def up(settings: Settings, replicas: str | None = None) -> int:
    try:
        counts = parse_spec(replicas) if replicas is not None else {}
        check_shared_state(settings, counts)
    except ReplicaSpecError as exc:
        print(f"shuttle up: {exc}", file=sys.stderr)
        return 2
    log_dir = settings.data_dir / "logs"
    supervisor = Supervisor(settings, log_dir, replicas=counts)
    watch = Watch(supervisor, sys.stderr)

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # The watch stops first, so no process is started again while they are stopped.
        watch.stop()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    names = ", ".join(p.name for p in supervisor.endpoints)
    print(f"Starting Shuttle: {names} …", flush=True)
    try:
        supervisor.start()
    except LaunchError as exc:
        print(f"shuttle: could not start:\n{exc}", file=sys.stderr)
        return 1
    print(
        banner(settings, supervisor.endpoints, str(log_dir), str(supervisor.token_file)),
        flush=True,
    )
    try:
        while not watch.stopped:
            watch.check()
            time.sleep(WATCH_SECONDS)
        print("\nStopping Shuttle …", flush=True)
        return 0
    finally:
        supervisor.stop()
        print("Stopped.", flush=True)


class DatabaseProblem(Exception):
    """The gateway's database cannot be opened or migrated; the message says which."""


def _with_keys(settings: Settings, work: Callable[[KeyStore], Awaitable[T]]) -> T:
    """Run `work` on the gateway's key store, its database made (directory, migrations)
    first, as a fresh checkout has none yet."""
    import asyncio

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.stores.db import create_schema
    from gateway.stores.keys import KeyStore
    from shuttle.db import create_engine, sqlite_path

    url = settings.sqlalchemy_url
    database_file = sqlite_path(url)

    async def run() -> T:
        engine = create_engine(url)
        try:
            await create_schema(engine)
            return await work(KeyStore(engine))
        finally:
            await engine.dispose()

    try:
        if database_file is not None:
            Path(database_file).parent.mkdir(parents=True, exist_ok=True)
        return asyncio.run(run())
    except (OSError, SQLAlchemyError) as exc:
        where = make_url(url).render_as_string(hide_password=True)
        detail = getattr(exc, "orig", None) or exc
        raise DatabaseProblem(
            f"cannot use the gateway's database ({where}): {detail}; "
            "check SHUTTLE_DATABASE_URL or SHUTTLE_DATA_DIR"
        ) from exc


def create_key(settings: Settings, tenant: str, name: str) -> int:
    try:
        made = _with_keys(settings, lambda keys: keys.create(tenant, name))
    except ValueError as exc:
        print(f"shuttle: {exc}", file=sys.stderr)
        return 2
    except DatabaseProblem as exc:
        print(f"shuttle: {exc}", file=sys.stderr)
        return 1
    print(
        f"API key {made.key.key_id} for tenant {tenant!r} (shown once; store it now):",
        file=sys.stderr,
    )
    sys.stdout.write(f"{made.secret}\n")
    return 0


def revoke_key(settings: Settings, key_id: str) -> int:
    try:
        revoked = _with_keys(settings, lambda keys: keys.revoke(key_id))
    except DatabaseProblem as exc:
        print(f"shuttle: {exc}", file=sys.stderr)
        return 1
    if not revoked:
        print(
            f"shuttle: no active API key {key_id!r} (unknown, or already revoked)", file=sys.stderr
        )
        return 1
    print(f"API key {key_id} revoked; its requests and stream tickets are refused from now on")
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="shuttle", description=__doc__.splitlines()[0])
    commands = root.add_subparsers(dest="command", required=True)
    up_cmd = commands.add_parser("up", help="start all services on this machine")
    up_cmd.add_argument(
        "--replicas",
        metavar="SPEC",
        help="processes per service: a number for every service, or a list such as "
        "executor=3,gateway=2 (others: 1); needs SHUTTLE_DATABASE_URL (PostgreSQL) and "
        "SHUTTLE_REDIS_URL",
    )
    run_cmd = commands.add_parser("run", help="run a task and watch it live")
    run_cmd.add_argument("query")
    events_cmd = commands.add_parser("events", help="print a workflow's event log")
    events_cmd.add_argument("workflow_id")
    events_cmd.add_argument("--json", action="store_true", help="one JSON envelope per line")
    tasks_cmd = commands.add_parser("tasks", help="list recent tasks")
    tasks_cmd.add_argument("--limit", type=int, default=20)
    approve_cmd = commands.add_parser("approve", help="approve (or --deny) a pending tool call")
    approve_cmd.add_argument("approval_id")
    approve_cmd.add_argument("--deny", action="store_true")
    approve_cmd.add_argument("--comment", default="")
    apikey = commands.add_parser("apikey", help="manage API keys")
    apikey_commands = apikey.add_subparsers(dest="apikey_command", required=True)
    create = apikey_commands.add_parser("create", help="create a key; it is printed once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", default="")
    revoke = apikey_commands.add_parser(
        "revoke", help="revoke a key: its requests and stream tickets are refused from now on"
    )
    revoke.add_argument("key_id", help="the key's id, as `apikey create` printed it (key-…)")
    for sub in (run_cmd, events_cmd, tasks_cmd, approve_cmd):
        sub.add_argument("--gateway", help="gateway URL (default: SHUTTLE_GATEWAY_URL)")
    return root


def client_command(settings: Settings, args: argparse.Namespace) -> int:
    from cli import client
    from shuttle.client import ShuttleClient, ShuttleError

    def lost(reason: str, last_seq: int) -> None:
        print(f"(connection lost: {reason}; resuming after event {last_seq})", file=sys.stderr)

    shuttle = ShuttleClient(
        args.gateway or settings.gateway_base_url, settings.api_key, on_reconnect=lost
    )
    try:
        if args.command == "run":
            view = client.LiveView()
            client.run(shuttle, args.query, view)
            failed = view.done is None or view.done.get("error") or view.done.get("cancelled")
            return 1 if failed else 0
        if args.command == "events":
            client.events(shuttle, args.workflow_id, sys.stdout, args.json)
        elif args.command == "tasks":
            client.tasks(shuttle, sys.stdout, args.limit)
        elif args.command == "approve":
            client.approve(shuttle, args.approval_id, args.deny, args.comment, sys.stdout)
    except ShuttleError as exc:
        print(f"shuttle {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Only the watching stops: the run goes on in the background.
        print("\nstopped watching; the task goes on", file=sys.stderr)
        return 130
    finally:
        shuttle.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        sys.exit(f"shuttle: {exc}")
    if args.command == "up":
        sys.exit(up(settings, args.replicas))
    if args.command == "apikey" and args.apikey_command == "revoke":
        sys.exit(revoke_key(settings, args.key_id))
    if args.command == "apikey":
        sys.exit(create_key(settings, args.tenant, args.name))
    sys.exit(client_command(settings, args))
