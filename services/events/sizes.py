"""What an event counts for against the log's byte bounds.

Each measure is a few ``len`` calls on the event's text, so a bound costs an append no more
than an integer add and compare per event.
"""

from __future__ import annotations

from .records import StoredEvent

# An event held in memory besides its characters: the record, its attribute dict, its
# timestamp, four string headers and the deque's slot (440 bytes by sys.getsizeof).
HELD_OVERHEAD = 448
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
