"""Cuts of a read of the log: up to its STREAM_END, within a page's bounds, or as far as
its seqs run without a gap."""

from __future__ import annotations

from .records import StoredEvent
from .sizes import wire_bytes


def wanted_part(
    batch: list[StoredEvent], wanted: frozenset[str] | None
) -> tuple[list[StoredEvent], bool]:
    """The events of `batch` a reader asked for, up to STREAM_END; and whether it came."""
    ended = False
    for index, event in enumerate(batch):
        if event.type == "STREAM_END":
            batch, ended = batch[: index + 1], True
            break
    if wanted is not None:
        batch = [e for e in batch if e.type in wanted or e.type == "STREAM_END"]
    return batch, ended


def leading_run(events: list[StoredEvent], cursor: int) -> list[StoredEvent]:
    """The events of `events` that follow `cursor` without a missing seq."""
    for index, event in enumerate(events):
        if event.seq != cursor + index:
            return events[:index]
    return events


def within_bounds(events: list[StoredEvent], limit: int, max_bytes: int) -> list[StoredEvent]:
    """The leading events of `events` up to `limit` of them and `max_bytes` of their sizes;
    the first whatever its size."""
    total = 0
    for index, event in enumerate(events):
        total += wire_bytes(event)
        if index == limit or (index and total > max_bytes):
            return events[:index]
    return events
