"""Small write transactions run in place on a SQLite file: on the calling thread, never
waiting for another writer (such a transaction runs again, whole, on the fallback), never
checkpointing on that thread, and failing as any transaction does on any other error."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from shuttle.db import create_engine, sqlite_sync_engine
from shuttle.sql_transactions import EngineWrites
from shuttle.sqlite_in_place import WriteInPlace, small_writes_for

COUNTER = "CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)"


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "in-place.db"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute(COUNTER)
    setup.execute("INSERT INTO counter VALUES (1, 0)")
    setup.commit()
    setup.close()
    yield path


def bump(conn: Connection, by: int) -> str:
    conn.execute(text("UPDATE counter SET n = n + :by WHERE id = 1"), {"by": by})
    return threading.current_thread().name


def count(path: Path) -> int:
    reader = sqlite3.connect(path)
    try:
        return int(reader.execute("SELECT n FROM counter").fetchone()[0])
    finally:
        reader.close()


def copy_of_file_alone(database: Path, copy: Path) -> Path:
    copy.write_bytes(database.read_bytes())
    return copy


class Fallback:
    """Runs a transaction as a writer thread would: it waits for the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls = 0

    async def __call__(self, work: Any, *args: Any) -> Any:
        self.calls += 1
        engine = sqlite_sync_engine(f"sqlite:///{self.path}")
        try:
            with engine.begin() as conn:
                return work(conn, *args) + " (fallback)"
        finally:
            engine.dispose()


async def test_a_transaction_runs_on_the_calling_thread(database: Path) -> None:
    fallback = Fallback(database)
    in_place = WriteInPlace(f"sqlite+aiosqlite:///{database}", fallback)
    try:
        ran_on = await in_place.write(bump, 2)
    finally:
        await in_place.close()
    assert ran_on == threading.current_thread().name
    assert fallback.calls == 0
    assert count(database) == 2


async def test_a_held_file_sends_the_whole_transaction_to_the_fallback(database: Path) -> None:
    fallback = Fallback(database)
    in_place = WriteInPlace(f"sqlite+aiosqlite:///{database}", fallback)
    holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE counter SET n = n + 10 WHERE id = 1")
    try:
        # The fallback itself waits (busy timeout) until the holder commits: let it, on a
        # timer, so that the in-place attempt meets the held file and nothing else.
        threading.Timer(0.2, holder.execute, ("COMMIT",)).start()
        ran_on = await in_place.write(bump, 1)
    finally:
        holder.close()
        await in_place.close()
    assert ran_on.endswith("(fallback)")
    assert fallback.calls == 1
    assert count(database) == 11  # the in-place attempt left nothing behind


async def test_other_errors_fail_the_transaction_and_leave_nothing(database: Path) -> None:
    fallback = Fallback(database)
    in_place = WriteInPlace(f"sqlite+aiosqlite:///{database}", fallback)

    def bump_then_fail(conn: Connection) -> None:
        bump(conn, 5)
        conn.execute(text("UPDATE no_such_table SET n = 1"))

    try:
        with pytest.raises(OperationalError, match="no such table"):
            await in_place.write(bump_then_fail)
        assert await in_place.write(bump, 1) == threading.current_thread().name
    finally:
        await in_place.close()
    assert fallback.calls == 0
    assert count(database) == 1


async def test_the_log_is_checkpointed_on_a_worker_thread(database: Path, tmp_path: Path) -> None:
    in_place = WriteInPlace(f"sqlite+aiosqlite:///{database}", Fallback(database), 3)
    # Open (and reading) throughout, so no connection's closing checkpoints the log.
    reader = sqlite3.connect(database)
    reader.execute("SELECT n FROM counter").fetchone()
    try:
        for _ in range(3):
            await in_place.write(bump, 7)
        await in_place.close()  # waits for the checkpoint under way
        # The file alone, without its log, holds the writes once they are checkpointed.
        alone = copy_of_file_alone(database, tmp_path / "alone.db")
    finally:
        reader.close()
    assert count(alone) == 21


async def test_a_process_s_small_writes_go_in_place_then_to_its_writer_thread(
    database: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{database}")
    writes = small_writes_for(engine)
    holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    try:
        assert await writes.write(bump, 1) == threading.current_thread().name
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("UPDATE counter SET n = n + 10 WHERE id = 1")
        threading.Timer(0.2, holder.execute, ("COMMIT",)).start()
        # The file is held: the transaction waits its turn on the writer thread instead.
        assert (await writes.write(bump, 1)).startswith("sqlite-writer")
    finally:
        holder.close()
        await writes.close()
        await engine.dispose()
    assert count(database) == 12
    in_memory = create_engine("sqlite+aiosqlite://")
    assert isinstance(small_writes_for(in_memory), EngineWrites)
    await in_memory.dispose()
