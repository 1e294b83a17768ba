"""Payloads that carry the time they were made, so a reader can tell how long they took to
reach it: `{"t": <perf_counter_ns>}`. The clock is this machine's, so the producer and the
reader must share it."""

from __future__ import annotations

import json
import re
import time

STAMP = re.compile(rb'"t": ?(\d+)')
"""The stamp in a payload's bytes, for a reader that does not parse the JSON."""


def stamp() -> str:
    """A payload carrying the time it was made."""
    return json.dumps({"t": time.perf_counter_ns()})


def since(payload_json: str) -> float:
    """Milliseconds from a stamped payload's making until now."""
    sent: int = json.loads(payload_json)["t"]
    return (time.perf_counter_ns() - sent) / 1e6
