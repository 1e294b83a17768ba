"""SQLite transactions on threads of their own: each thread keeps one connection, a failed
transaction leaves nothing behind, and readers see what writers committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from shuttle.sql_transactions import SqliteReaders, SqliteWriter


def create(conn: Connection) -> None:
    conn.execute(text("create table notes (id integer primary key, body text not null)"))


def add(conn: Connection, body: str) -> Connection:
    conn.execute(text("insert into notes (body) values (:body)"), {"body": body})
    return conn


def add_then_fail(conn: Connection, body: str) -> None:
    add(conn, body)
    raise RuntimeError("the work failed")


def bodies(conn: Connection) -> list[str]:
    return list(conn.execute(text("select body from notes order by id")).scalars())


async def test_a_writer_reuses_its_connection_and_a_failure_rolls_back(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'notes.db'}"
    writer, readers = SqliteWriter(url), SqliteReaders(url)
    try:
        await writer.write(create)
        first = await writer.write(add, "kept")
        with pytest.raises(RuntimeError, match="the work failed"):
            await writer.write(add_then_fail, "lost")
        again = await writer.write(add, "kept too")
        assert first is again  # one connection for the thread, not one per transaction
        assert await readers.run(bodies) == ["kept", "kept too"]
    finally:
        await writer.close()
        await readers.close()
    assert writer.engine.pool.status().endswith("Current Checked out connections: 0")
