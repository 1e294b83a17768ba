"""Checks on what callers send, with messages that say which field or event is wrong."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from datetime import datetime

import orjson

from shuttle.envelope import EVENT_TYPE_NAMES
from shuttle.utf8 import utf8_size

from .errors import InvalidArgument
from .lifecycle import is_terminal
from .models import ID_LENGTH
from .records import NewEvent

MAX_BATCH_EVENTS = 1000
MAX_BATCH_BYTES = 4 * 1024 * 1024
DEFAULT_PAGE_LIMIT = 100
MAX_PAGE_LIMIT = 1000
# A run's spec is its request (history and context included), which the gateway bounds at
# SHUTTLE_GATEWAY_MAX_BODY_BYTES (at most 8 MiB).
MAX_SPEC_BYTES = 8 * 1024 * 1024
# Lease epochs are stored in a signed 64-bit column.
MAX_EPOCH = 2**63 - 1
# A lease lasts at most an hour from its grant.
MAX_TTL_MS = 3_600_000

_ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:@-]{{0,{ID_LENGTH - 1}}}")
_KNOWN_TYPES = frozenset(EVENT_TYPE_NAMES)


def check_id(field: str, value: str) -> None:
    """Ids are 1-128 characters of letters, digits and ``._:@-``, starting alphanumeric."""
    if not value:
        raise InvalidArgument(f"{field} is required")
    if not _ID_PATTERN.fullmatch(value):
        raise InvalidArgument(
            f"{field} {value[:ID_LENGTH]!r} is not a valid id: use 1-{ID_LENGTH} letters, "
            "digits or ._:@- starting with a letter or digit"
        )


def check_key(field: str, value: str) -> None:
    """Free-form keys (session ids) only need to fit their column."""
    if len(value) > ID_LENGTH:
        raise InvalidArgument(f"{field} is {len(value)} characters; at most {ID_LENGTH} allowed")


def check_batch(batch: Sequence[NewEvent], latest: datetime | None = None) -> None:
    """A batch is 1-1000 events of known types, JSON-object payloads, at most 4 MiB,
    with nothing after a STREAM_END, and (given `latest`) no timestamp later than it."""
    if not batch:
        raise InvalidArgument("events is empty: a batch holds at least one event")
    if len(batch) > MAX_BATCH_EVENTS:
        raise InvalidArgument(
            f"batch has {len(batch)} events; at most {MAX_BATCH_EVENTS} are allowed per append"
        )
    size = sum(_size(event) for event in batch)
    if size > MAX_BATCH_BYTES:
        raise InvalidArgument(
            f"batch is {size} bytes; at most {MAX_BATCH_BYTES} (4 MiB) are allowed per append"
        )
    end_at: int | None = None
    terminal_at: int | None = None
    for index, event in enumerate(batch):
        if end_at is not None:
            raise InvalidArgument(
                f"event {index}: nothing may follow STREAM_END (event {end_at} of this batch)"
            )
        if terminal_at is not None and event.type != "STREAM_END":
            raise InvalidArgument(
                f"event {index}: only STREAM_END may follow the terminal event "
                f"{batch[terminal_at].type} (event {terminal_at} of this batch)"
            )
        if event.type not in _KNOWN_TYPES:
            raise InvalidArgument(
                f"event {index}: type {event.type or 'EVENT_TYPE_UNSPECIFIED'} is not an "
                "event type; set one of the 35 EventType values"
            )
        _check_payload(index, event.payload_json)
        if event.timestamp is not None:
            _check_timestamp(index, event.timestamp, latest)
        if event.type == "STREAM_END":
            end_at = index
        elif is_terminal(event):
            terminal_at = index


def _check_timestamp(index: int, moment: datetime, latest: datetime | None) -> None:
    if moment.tzinfo is None:
        raise InvalidArgument(f"event {index}: timestamp has no time zone")
    if latest is not None and moment > latest:
        raise InvalidArgument(
            f"event {index}: timestamp {moment.isoformat()} is in the future (the log takes "
            f"none later than {latest.isoformat()}, SHUTTLE_EVENTS_MAX_FUTURE_SECONDS past "
            "its own clock): check the producer's clock"
        )


def check_producer(producer_id: str, batch_seq: int) -> None:
    """A producer id is optional; when given it is an id, and batch_seq needs one."""
    if producer_id:
        check_id("producer_id", producer_id)
    elif batch_seq:
        raise InvalidArgument("batch_seq is set but producer_id is empty: name the producer")


def check_epoch(field: str, value: int) -> None:
    """An epoch fits the row's 64-bit column (0 means none)."""
    if not 0 <= value <= MAX_EPOCH:
        raise InvalidArgument(f"{field} must be 0 to {MAX_EPOCH} (got {value})")


def check_ttl(field: str, ttl_ms: int) -> None:
    """A lease's time to live: 1 ms to an hour."""
    if not 1 <= ttl_ms <= MAX_TTL_MS:
        raise InvalidArgument(f"{field} must be 1 to {MAX_TTL_MS} (got {ttl_ms})")


def check_spec(spec_json: str) -> None:
    """A run's spec is empty or a JSON object of at most 8 MiB."""
    if not spec_json:
        return
    size = utf8_size(spec_json)
    if size > MAX_SPEC_BYTES:
        raise InvalidArgument(
            f"spec_json is {size} bytes; at most {MAX_SPEC_BYTES} (8 MiB) are allowed"
        )
    try:
        value = orjson.loads(spec_json)
    except orjson.JSONDecodeError:
        value = _standard_parse_field("spec_json", spec_json)
    if not isinstance(value, dict):
        raise InvalidArgument(f"spec_json must be a JSON object, not {_json_kind(value)}")


def check_types(types: Collection[str] | None) -> frozenset[str] | None:
    """A types filter: None or empty means all types."""
    if not types:
        return None
    for index, name in enumerate(types):
        if name not in _KNOWN_TYPES:
            raise InvalidArgument(
                f"types[{index}]: {name or 'EVENT_TYPE_UNSPECIFIED'} is not an event type"
            )
    return frozenset(types)


def check_limit(limit: int) -> int:
    """The page size: 0 means the default of 100; more than 1000 is refused."""
    if limit < 0:
        raise InvalidArgument(f"limit must not be negative (got {limit})")
    if limit > MAX_PAGE_LIMIT:
        raise InvalidArgument(f"limit must be at most {MAX_PAGE_LIMIT} (got {limit})")
    return limit or DEFAULT_PAGE_LIMIT


def _check_payload(index: int, payload_json: str) -> None:
    if not payload_json:
        return  # an absent payload is an empty object
    try:
        # Every appended event's payload is parsed here: orjson takes about a seventh of the
        # time json does.
        value = orjson.loads(payload_json)
    except orjson.JSONDecodeError:
        # orjson refuses some valid JSON (a lone surrogate escape, a number beyond a double):
        # the standard parser has the last word, and its message says what is wrong.
        value = _standard_parse(index, payload_json)
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"event {index}: payload_json must be a JSON object, not {_json_kind(value)}"
        )


def _standard_parse(index: int, payload_json: str) -> object:
    return _standard_parse_field(f"event {index}: payload_json", payload_json)


def _standard_parse_field(field: str, text: str) -> object:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise InvalidArgument(f"{field} is not valid JSON ({exc})") from None


def _reject_constant(name: str) -> object:
    # Python's json accepts NaN and Infinity; JSON (and every browser) does not.
    raise ValueError(f"{name} is not JSON")


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"


def _size(event: NewEvent) -> int:
    return sum(
        utf8_size(text)
        for text in (event.type, event.agent_id, event.message, event.payload_json, event.trace_id)
    )
