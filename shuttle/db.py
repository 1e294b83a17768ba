"""Async engine factory shared by every service that keeps tables: SQLite (aiosqlite) tuned
for concurrent writers (the services share one file by default), or any other URL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, Dialect, Engine, String, Text, TypeDecorator, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from shuttle.utf8 import storable_text

# How long a SQLite writer waits for another one before "database is locked". Appends are
# short transactions, so a generous bound only matters under a burst of concurrent runs.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def create_engine(
    url: str, *, echo: bool = False, connect_args: dict[str, Any] | None = None
) -> AsyncEngine:
    """An AsyncEngine for `url`; SQLite files get WAL, a busy timeout and foreign keys;
    database servers get their pooled connections checked before use."""
    sqlite = make_url(url).get_backend_name() == "sqlite"
    # A restarted database server leaves every pooled connection closed; without the check
    # each would fail one request (e.g. a task submission) before the pool replaced it.
    engine = create_async_engine(
        url, echo=echo, connect_args=connect_args or {}, pool_pre_ping=not sqlite
    )
    if sqlite:
        event.listen(engine.sync_engine, "connect", _tune_sqlite)
    return engine


def sqlite_sync_engine(url: str) -> Engine:
    """A synchronous engine on the same SQLite file as the async `url`, tuned alike."""
    parsed = make_url(url)
    engine = create_sync_engine(parsed.set(drivername="sqlite"))
    event.listen(engine, "connect", _tune_sqlite)
    return engine


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers (replays, history pages) run while one writer appends; the busy
    # timeout makes concurrent writers queue instead of failing; NORMAL sync is durable
    # across process crashes in WAL mode, which is what a restarted service needs.
    run_pragmas(
        dbapi_connection,
        "journal_mode=WAL",
        f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
        "synchronous=NORMAL",
        "foreign_keys=ON",
    )


def run_pragmas(dbapi_connection: Any, *pragmas: str) -> None:
    """Run `PRAGMA <each>` on a raw SQLite connection, as a connect listener does."""
    cursor = dbapi_connection.cursor()
    try:
        for pragma in pragmas:
            cursor.execute(f"PRAGMA {pragma}")
    finally:
        cursor.close()


def sqlite_path(url: str) -> str | None:
    """The file a SQLite URL points at, or None for other backends and in-memory databases."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    return None if database in ("", ":memory:") else database


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    SQLite keeps no offset, so values come back naive; they were written as UTC, so they are
    marked UTC on the way out. PostgreSQL stores ``timestamptz`` and returns aware values.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class StoredText(TypeDecorator[str]):
    """Free text (a user's query, a tool's output) as every backend stores it: NUL, which
    PostgreSQL refuses, and lone surrogates become U+FFFD (`storable_text`). Rows go in
    batches, so one refused value would fail the rows written beside it."""

    impl: type[String] = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else storable_text(value)


class StoredString(StoredText):
    """`StoredText` in a column of bounded length: ``StoredString(200)``."""

    impl = String
    cache_ok = True  # SQLAlchemy reads it from each class's own attributes
