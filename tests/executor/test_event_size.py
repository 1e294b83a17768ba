"""Events cut to what the log takes, and batches split to its limit."""

from __future__ import annotations

import json

from shuttle.events_client.sizes import (
    BATCH_MAX_BYTES,
    EVENT_MAX_BYTES,
    MESSAGE_MAX_CHARS,
    encode,
    first_batch,
)
from shuttle.workflow_log import EventDraft


def test_an_event_that_fits_is_encoded_as_it_is() -> None:
    encoded = encode(EventDraft("LLM_OUTPUT", "done", {"output": "caf\u00e9", "n": 1}, "a"))
    assert json.loads(encoded.payload_json) == {"output": "caf\u00e9", "n": 1}
    assert encoded.size == len(b"done") + len(encoded.payload_json.encode())


def test_the_longest_texts_of_an_oversized_event_are_cut_with_a_note() -> None:
    big, bigger = "\u00e9" * 700_000, "x" * 900_000  # 1.4 MB and 0.9 MB of UTF-8
    draft = EventDraft(
        "LLM_OUTPUT", "m" * 20_000, {"output": bigger, "calls": [{"args": big}], "model": "m1"}
    )
    encoded = encode(draft)
    payload = json.loads(encoded.payload_json)
    assert encoded.size <= EVENT_MAX_BYTES
    assert len(encoded.payload_json.encode()) + len(encoded.message.encode()) == encoded.size
    assert payload["truncated"] is True and payload["model"] == "m1"
    assert payload["calls"][0]["args"].endswith("…[truncated: 700,000 characters in all]")
    assert payload["calls"][0]["args"].startswith("\u00e9" * 1000)
    assert encoded.message.endswith("[truncated: 20,000 characters in all]")
    assert encoded.message.startswith("m" * MESSAGE_MAX_CHARS)
    assert draft.payload["output"] == bigger  # the engine's own copy is left whole


def test_a_batch_takes_events_up_to_the_limit_and_always_one() -> None:
    event = encode(EventDraft("THREAD_MESSAGE_DELTA", "", {"delta": "x" * 2_000_000}))
    assert event.size <= EVENT_MAX_BYTES
    per_batch = BATCH_MAX_BYTES // event.size
    assert len(first_batch([event] * 10)) == per_batch
    small = encode(EventDraft("PROGRESS", "p"))
    assert len(first_batch([small] * 300)) == 300
    # Were one event ever larger than a batch, it would still go alone (and be refused).
    huge = event._replace(size=BATCH_MAX_BYTES + 1)
    assert first_batch([huge, small]) == [huge]
