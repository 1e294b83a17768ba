"""``python -m services.events.admin migrate|purge``: schema and retention by hand.

`make migrate` and `make purge` run these with the same SHUTTLE_* settings as the service.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta
from pathlib import Path

from shuttle.db import create_engine, sqlite_path
from shuttle.settings import SettingsError, load_settings

from .migrate import current_revision, migrate
from .retention import purge
from .store import SqlEventStore, utc_now


async def _migrate(url: str) -> str:
    database_file = sqlite_path(url)
    if database_file is not None:
        Path(database_file).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    try:
        await migrate(engine)
        return f"events schema at revision {await current_revision(engine)}"
    finally:
        await engine.dispose()


async def _purge(url: str, days: float) -> str:
    engine = create_engine(url)
    store = SqlEventStore(engine)
    try:
        report = await purge(store, utc_now() - timedelta(days=days))
    finally:
        await store.close()
        await engine.dispose()
    return (
        f"purged {report.workflows} workflows ({report.events} events) idle since before "
        f"{report.cutoff.isoformat(timespec='seconds')}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.events.admin")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="bring the events tables to the latest schema")
    purge_parser = commands.add_parser("purge", help="delete workflows past retention")
    purge_parser.add_argument(
        "--days", type=float, default=None, help="default: SHUTTLE_EVENTS_RETENTION_DAYS"
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(exc, file=sys.stderr)
        return 2
    url = settings.sqlalchemy_url
    if args.command == "migrate":
        print(asyncio.run(_migrate(url)))
    else:
        days = args.days if args.days is not None else settings.events_retention_days
        if days <= 0:
            print("--days must be positive", file=sys.stderr)
            return 2
        print(asyncio.run(_purge(url, days)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
