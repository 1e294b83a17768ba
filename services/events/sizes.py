"""What an event counts for against the log's byte bounds: in memory, on the wire, in SQL.

Each measure is a few ``len`` calls on the event's text, so a bound costs an append no more
than an integer add and compare per event.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Integer
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from .records import StoredEvent

# An event held in memory besides its characters: the record, its attribute dict, its
# timestamp, four string headers and the deque's slot (440 bytes by sys.getsizeof).
HELD_OVERHEAD = 448
# An Event message besides its text fields: seq, stream id, timestamp, workflow id (at most
# 128 bytes), tags and lengths.
WIRE_OVERHEAD = 256
# The widest a character of a Python str can be: a str holding one character beyond U+FFFF
# takes four bytes for each of its characters.
WIDEST_CHARACTER = 4


def held_bytes(event: StoredEvent) -> int:
    """The memory an event takes in an in-process tier, counted from above: one byte per
    character of ASCII text, four otherwise (the most Python may use per character)."""
    payload, message, agent_id, trace_id = (
        event.payload_json,
        event.message,
        event.agent_id,
        event.trace_id,
    )
    size = len(payload) + len(message) + len(agent_id) + len(trace_id)
    if not (payload.isascii() and message.isascii() and agent_id.isascii() and trace_id.isascii()):
        size *= WIDEST_CHARACTER
    return size + HELD_OVERHEAD


def wire_bytes(event: StoredEvent) -> int:
    """The bytes an event takes in a message, counted from above: the UTF-8 of its text
    fields plus `WIRE_OVERHEAD` (the same count as `sql_wire_bytes` for a stored event)."""
    return (
        _utf8(event.type)
        + _utf8(event.agent_id)
        + _utf8(event.message)
        + _utf8(event.payload_json)
        + _utf8(event.trace_id)
        + WIRE_OVERHEAD
    )


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class byte_length(FunctionElement[int]):
    """The UTF-8 bytes of a text column: ``octet_length`` where SQL has it, a length in
    bytes of the text cast to a blob on SQLite (whose ``octet_length`` is recent)."""

    type = Integer()
    inherit_cache = True


@compiles(byte_length)
def _octet_length(element: byte_length, compiler: SQLCompiler, **kw: object) -> str:
    return f"octet_length({compiler.process(element.clauses, **kw)})"


@compiles(byte_length, "sqlite")
def _sqlite_byte_length(element: byte_length, compiler: SQLCompiler, **kw: object) -> str:
    return f"length(CAST({compiler.process(element.clauses, **kw)} AS BLOB))"


def sql_wire_bytes(*columns: ColumnElement[str]) -> ColumnElement[int]:
    """`wire_bytes` in SQL: the sum of the columns' UTF-8 bytes plus `WIRE_OVERHEAD`."""
    total: ColumnElement[int] = byte_length(columns[0])
    for column in columns[1:]:
        total = total + byte_length(column)
    return total + WIRE_OVERHEAD
