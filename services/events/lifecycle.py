"""How lifecycle events move a workflow's row: status, outcome and usage (pure functions)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shuttle.envelope import TERMINAL_TYPES
from shuttle.utf8 import json_text, storable_text

from .records import NewEvent, WorkflowStatus

log = logging.getLogger(__name__)

# The row's count columns are 64-bit signed integers.
MAX_COUNT = 2**63 - 1

# Lifecycle events whose type alone decides the status.
_STATUS_BY_TYPE: Mapping[str, WorkflowStatus] = {
    "WORKFLOW_STARTED": WorkflowStatus.RUNNING,
    "WORKFLOW_PAUSED": WorkflowStatus.PAUSED,
    "WORKFLOW_RESUMED": WorkflowStatus.RUNNING,
    "WORKFLOW_COMPLETED": WorkflowStatus.COMPLETED,
    "WORKFLOW_CANCELLED": WorkflowStatus.CANCELLED,
}


@dataclass(frozen=True)
class RowUpdate:
    """Column values a batch sets on its workflow's row (None: leave the column as it is)."""

    status: WorkflowStatus | None = None
    result: str | None = None
    error: str | None = None
    duration_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float | None = None
    stream_ended: bool = False

    def columns(self) -> dict[str, Any]:
        """The non-None values, keyed by column name."""
        values = {
            "result": self.result,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
        }
        if self.stream_ended:
            values["stream_ended"] = True
        return {name: value for name, value in values.items() if value is not None}


def payload_of(event: NewEvent) -> dict[str, Any]:
    """The payload as a dict; callers validated it is a JSON object (or empty)."""
    if not event.payload_json:
        return {}
    value = json.loads(event.payload_json)
    return value if isinstance(value, dict) else {}


def is_terminal(event: NewEvent) -> bool:
    """WORKFLOW_COMPLETED, WORKFLOW_CANCELLED, or an ERROR_OCCURRED with ``"fatal": true``."""
    if event.type in TERMINAL_TYPES:
        return True
    return event.type == "ERROR_OCCURRED" and payload_of(event).get("fatal") is True


def close_after_terminal(batch: Sequence[NewEvent]) -> tuple[list[NewEvent], int | None]:
    """The batch with a STREAM_END right after its terminal event when the producer did not
    send one (so the log ends in the same transaction that records how the workflow ended),
    and the index of the added event (None: nothing added). Validation has already refused
    anything but STREAM_END after a terminal event."""
    closed = list(batch)
    for index, event in enumerate(closed):
        if is_terminal(event) and (
            index + 1 == len(closed) or closed[index + 1].type != "STREAM_END"
        ):
            closed.insert(
                index + 1,
                NewEvent(
                    type="STREAM_END",
                    agent_id=event.agent_id,
                    message="Stream ended",
                    trace_id=event.trace_id,
                ),
            )
            return closed, index + 1
    return closed, None


def derive_update(batch: Sequence[NewEvent]) -> RowUpdate:
    """Fold a batch's lifecycle events, in order, into the row update they imply."""
    update = RowUpdate()
    for index, event in enumerate(batch):
        if event.type == "STREAM_END":
            update = replace(update, stream_ended=True)
            continue
        if event.type != "ERROR_OCCURRED" and event.type not in _STATUS_BY_TYPE:
            continue
        payload = payload_of(event)
        if event.type == "ERROR_OCCURRED":
            # A recoverable error is just a report; only `"fatal": true` ends the run.
            if payload.get("fatal") is not True:
                continue
            error = payload.get("error_message") or payload.get("error") or event.message
            update = replace(update, status=WorkflowStatus.FAILED, error=_text(error))
        else:
            update = replace(update, status=_STATUS_BY_TYPE[event.type])
            if "result" in payload and update.status == WorkflowStatus.COMPLETED:
                update = replace(update, result=_text(payload["result"]))
        if update.status is not None and update.status.is_terminal:
            update = _with_usage(update, payload, index)
    return update


def _with_usage(update: RowUpdate, payload: Mapping[str, Any], index: int) -> RowUpdate:
    """Take the totals a terminal event reports; absent or malformed values are ignored.

    Only terminal events' numbers reach the row, and refusing one for an absurd number
    would lose how its run ended: a count above the column's range is stored as
    `MAX_COUNT`, a negative or non-finite number is left out, and the event itself is kept
    as sent. Each is logged with the field, the event's index and the bound."""
    return replace(
        update,
        duration_ms=_count("duration_ms", payload.get("duration_ms"), index, update.duration_ms),
        total_tokens=_count(
            "total_tokens", payload.get("total_tokens"), index, update.total_tokens
        ),
        input_tokens=_count(
            "input_tokens", payload.get("input_tokens"), index, update.input_tokens
        ),
        output_tokens=_count(
            "output_tokens", payload.get("output_tokens"), index, update.output_tokens
        ),
        cost_usd=_amount("total_cost_usd", payload.get("total_cost_usd"), index, update.cost_usd),
    )


def _text(value: Any) -> str:
    # A column holds text: an escaped NUL or lone surrogate, parsed, may not be storable.
    return storable_text(value) if isinstance(value, str) else json_text(value)


def _count(field: str, value: object, index: int, default: int | None) -> int | None:
    # bool is an int subclass; `true` is not a token count.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        if not math.isfinite(value):
            _out_of_range(field, value, index, "a finite number", "left out")
        return default
    if value < 0:
        _out_of_range(field, value, index, "at least 0", "left out")
        return default
    if value > MAX_COUNT:
        _out_of_range(field, value, index, f"at most {MAX_COUNT}", f"stored as {MAX_COUNT}")
        return MAX_COUNT
    return int(value)


def _amount(field: str, value: object, index: int, default: float | None) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    try:
        amount = float(value)
    except OverflowError:  # an int beyond any float
        amount = math.inf
    if not math.isfinite(amount) or amount < 0:
        _out_of_range(field, value, index, "a finite number of at least 0", "left out")
        return default
    return amount


def _out_of_range(field: str, value: int | float, index: int, bound: str, done: str) -> None:
    # A huge int is named by its size: printing it costs time (or fails past 4300 digits).
    if isinstance(value, int) and value.bit_length() > 128:
        shown = f"(a {value.bit_length()}-bit integer)"
    else:
        shown = repr(value)
    log.warning(
        "event %d: %s %s is out of range (%s); %s on the workflow's row",
        index,
        field,
        shown,
        bound,
        done,
    )
