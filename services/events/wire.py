"""Wire form of the EventService: its descriptor, stored events as protobuf messages, and
bytes encoded once per event.

A live event goes out to every subscriber of its workflow. Building and serializing an
Event (and an EventBatch around it) per subscriber made fan-out cost grow with subscribers
times events; here each event is serialized once and a subscriber's EventBatch is a join of
those bytes (a repeated message field is its elements' encodings, each behind a tag and a
length, so the join is exactly what EventBatch.SerializeToString would give).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from shuttle.envelope import stream_id, type_value
from shuttle.v1 import common_pb2, events_pb2

from .records import StoredEvent

# The service as proto/shuttle/v1/events.proto declares it: its full name and its methods.
SERVICE = events_pb2.DESCRIPTOR.services_by_name["EventService"]
SERVICE_NAME: str = SERVICE.full_name

# An EventBatch message carries at most this many bytes (a lone larger event goes alone),
# well under gRPC's default 4 MiB limit.
MAX_BATCH_MESSAGE_BYTES = 512 * 1024
# Encodings kept: far more than the events of one fan-out, so each is encoded once; and at
# most about this many bytes (each entry counted twice: its bytes and the event it holds),
# so a run of large payloads cannot make the cache grow past it.
DEFAULT_CACHED_EVENTS = 16_384
DEFAULT_CACHED_BYTES = 64 * 1024 * 1024
# EventBatch.events is field 1, length-delimited: tag (1 << 3) | 2.
EVENTS_TAG = b"\x0a"


def event_message(event: StoredEvent) -> common_pb2.Event:
    """The protobuf form of a stored event."""
    message = common_pb2.Event(
        workflow_id=event.workflow_id,
        type=type_value(event.type),
        agent_id=event.agent_id,
        message=event.message,
        seq=event.seq,
        stream_id=stream_id(event.seq),
        payload_json=event.payload_json,
        trace_id=event.trace_id,
    )
    # Set in place: a Timestamp built apart is then copied into the Event (a fifth more).
    seconds, nanos = _epoch_parts(event.timestamp)
    message.timestamp.seconds = seconds
    message.timestamp.nanos = nanos
    return message


def timestamp(moment: datetime) -> Timestamp:
    # Timestamp.FromDatetime goes through time tuples; this is the same value, faster.
    seconds, nanos = _epoch_parts(moment)
    return Timestamp(seconds=seconds, nanos=nanos)


def _epoch_parts(moment: datetime) -> tuple[int, int]:
    whole = moment - _EPOCH
    return whole.days * 86_400 + whole.seconds, whole.microseconds * 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class EventEncoder:
    """Serialized events, cached by the identity of the StoredEvent.

    Identity rather than equality: hashing a whole event per subscriber is itself a cost,
    and an id is only unique while its object lives, so each entry holds its event (a
    recycled id can never find another event's bytes). Oldest entries go first.
    """

    def __init__(
        self, max_events: int = DEFAULT_CACHED_EVENTS, max_bytes: int = DEFAULT_CACHED_BYTES
    ) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self._max = max_events
        self._max_bytes = max_bytes
        # id(event) -> (event, EventBatch field bytes, length of their tag and size prefix)
        self._cache: OrderedDict[int, tuple[StoredEvent, bytes, int]] = OrderedDict()
        self.cached_bytes = 0
        """What the cached entries hold, by the count above."""
        self.encoded = 0
        """Events serialized so far (for tests and metrics)."""

    def event_bytes(self, event: StoredEvent) -> bytes:
        """The serialized Event, as Stream sends it."""
        framed, prefix = self._entry(event)
        return framed[prefix:]

    def batch_bytes(self, events: list[StoredEvent]) -> Iterator[bytes]:
        """Serialized EventBatch messages holding `events` in order, each at most
        MAX_BATCH_MESSAGE_BYTES (a lone larger event goes alone)."""
        for part in self._framed_parts(events):
            yield b"".join(part)

    def parts(self, events: list[StoredEvent]) -> Iterator[list[StoredEvent]]:
        """`events` cut into runs whose encodings fit MAX_BATCH_MESSAGE_BYTES, as
        `batch_bytes` cuts them, for messages that carry events beside other fields."""
        start = 0
        for part in self._framed_parts(events):
            yield events[start : start + len(part)]
            start += len(part)

    def _framed_parts(self, events: list[StoredEvent]) -> Iterator[list[bytes]]:
        part: list[bytes] = []
        size = 0
        for event in events:
            framed, _ = self._entry(event)
            if part and size + len(framed) > MAX_BATCH_MESSAGE_BYTES:
                yield part
                part, size = [], 0
            part.append(framed)
            size += len(framed)
        if part:
            yield part

    def _entry(self, event: StoredEvent) -> tuple[bytes, int]:
        entry = self._cache.get(id(event))
        if entry is not None and entry[0] is event:
            return entry[1], entry[2]
        encoded = event_message(event).SerializeToString()
        prefix = EVENTS_TAG + varint(len(encoded))
        framed = prefix + encoded
        while self._cache and (
            len(self._cache) >= self._max or self.cached_bytes + 2 * len(framed) > self._max_bytes
        ):
            # OrderedDict: a plain dict's next(iter()) walks past every slot deleted at its
            # front, which made eviction the hottest line of a busy service.
            _, (_, oldest, _) = self._cache.popitem(last=False)
            self.cached_bytes -= 2 * len(oldest)
        self._cache[id(event)] = (event, framed, len(prefix))
        self.cached_bytes += 2 * len(framed)
        self.encoded += 1
        return framed, len(prefix)


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
