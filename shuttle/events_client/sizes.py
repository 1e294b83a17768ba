"""What fits in one Append: events cut to a size the log takes, batches split to its limit.

The events service refuses a batch over 4 MiB whole, and a run whose batch is refused can
report nothing more. A model may well answer with megabytes (a runaway generation, a pasted
file), so the longest texts of an oversized event are cut, with a note saying how long they
were and `truncated: true` in the payload, rather than fail the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import Any, NamedTuple

from shuttle.utf8 import ensure_utf8, json_text, utf8_size
from shuttle.workflow_log import EventDraft

EVENT_MAX_BYTES = 1024 * 1024
"""Message and payload of one event, encoded."""
BATCH_MAX_BYTES = 4 * 1024 * 1024 - 64 * 1024
"""Events of one Append: the log's limit, less room for ids and framing."""
MESSAGE_MAX_CHARS = 16_000


class EncodedDraft(NamedTuple):  # a tuple: built for every event, on the run's hot path
    type: str
    agent_id: str
    message: str
    payload_json: str
    size: int
    """UTF-8 bytes of message and payload, as the log counts them."""
    at: float
    """When the event happened (seconds since the epoch)."""


def encode(draft: EventDraft, max_bytes: int = EVENT_MAX_BYTES) -> EncodedDraft:
    """`draft` with its payload as JSON, cut to `max_bytes` if it is larger."""
    # protobuf refuses a lone surrogate, and with it the whole batch
    message = _cut(ensure_utf8(draft.message), MESSAGE_MAX_CHARS)
    payload_json = json_text(draft.payload)
    size = utf8_size(message) + utf8_size(payload_json)
    if size > max_bytes:
        payload_json = _fitted(draft.payload, max_bytes - utf8_size(message))
        size = utf8_size(message) + utf8_size(payload_json)
    return EncodedDraft(
        draft.type, ensure_utf8(draft.agent_id), message, payload_json, size, draft.at
    )


def first_batch(
    drafts: Iterable[EncodedDraft], max_bytes: int = BATCH_MAX_BYTES
) -> list[EncodedDraft]:
    """The drafts, from the first, that go in one Append (always at least one). Read lazily,
    so drafts encoded on the way are encoded only if they are sent now."""
    batch: list[EncodedDraft] = []
    total = 0
    for draft in drafts:
        total += draft.size
        if total > max_bytes and batch:
            break
        batch.append(draft)
    return batch


def _fitted(payload: Mapping[str, Any], limit: int) -> str:
    """The payload as JSON, its longest texts cut, longest first, until it is at most
    `limit` bytes (one too large for want of long texts stays so, and the log refuses it)."""
    fitted: dict[str, Any] = _copy(payload)
    fitted["truncated"] = True
    text = json_text(fitted)
    for container, key in sorted(_texts(fitted), key=lambda at: -len(at[0][at[1]])):
        excess = utf8_size(text) - limit
        if excess <= 0:
            break
        whole: str = container[key]
        # Each character cut frees at least one byte, so cutting `excess` more than the
        # note takes is enough when this text is long enough; otherwise go on to the next.
        container[key] = _with_note(whole, max(0, len(whole) - excess - 80))
        text = json_text(fitted)
    return text


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(item) for item in value]
    return value


def _texts(value: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key) of every str in a copied payload, keys of mappings excluded."""
    items = value.items() if isinstance(value, MutableMapping) else enumerate(value)
    for key, item in items:
        if isinstance(item, str):
            yield value, key
        elif isinstance(item, MutableMapping | list):
            yield from _texts(item)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else _with_note(text, limit)


def _with_note(text: str, keep: int) -> str:
    return f"{text[:keep]}\n…[truncated: {len(text):,} characters in all]"
