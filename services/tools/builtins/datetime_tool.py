"""`datetime`: the current time, time-zone conversion, date arithmetic and differences."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.tools.catalog import ToolError, ToolOutput, ToolSpec

_UNITS = ("weeks", "days", "hours", "minutes", "seconds")


def _zone(name: str) -> tzinfo:
    if name.upper() in ("", "UTC", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(
            f"datetime: unknown time zone {name!r}; use an IANA name such as 'Europe/Paris'"
        ) from None


def _parse(text: str, zone_name: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ToolError(
            f"datetime: cannot read {text!r}; use ISO 8601, e.g. '2025-03-01T14:30:00+01:00'"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_zone(zone_name))
    return value


def _describe(value: datetime) -> str:
    return f"{value.isoformat()} ({value.strftime('%A')})"


class DateTimeTool:
    spec = ToolSpec(
        name="datetime",
        description=(
            "Date and time: 'now' in a time zone, 'convert' a time to another zone, 'add' a "
            "duration to a time, or 'diff' two times. Times are ISO 8601."
        ),
        parameters={
            "type": "object",
            "properties": {
                "operation": {"type": "string", "enum": ["now", "convert", "add", "diff"]},
                "time": {"type": "string", "description": "ISO 8601 time (convert/add/diff)"},
                "other": {"type": "string", "description": "second ISO 8601 time (diff)"},
                "timezone": {
                    "type": "string",
                    "description": "IANA zone for the result, e.g. 'Asia/Tokyo'; default UTC",
                },
                **{unit: {"type": "number"} for unit in _UNITS},
            },
            "required": ["operation"],
            "additionalProperties": False,
        },
        category="time",
        read_only=True,
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        operation = args["operation"]
        zone_name = args.get("timezone", "UTC")
        zone = _zone(zone_name)
        if operation == "now":
            return ToolOutput(text=_describe(datetime.now(zone)))
        if "time" not in args:
            raise ToolError(f"datetime: '{operation}' needs 'time'")
        value = _parse(args["time"], zone_name)
        if operation == "convert":
            return ToolOutput(text=_describe(value.astimezone(zone)))
        if operation == "add":
            try:
                delta = timedelta(**{unit: args[unit] for unit in _UNITS if unit in args})
                return ToolOutput(text=_describe(value + delta))
            except OverflowError:
                raise ToolError("datetime: the result is out of range") from None
        if "other" not in args:
            raise ToolError("datetime: 'diff' needs 'time' and 'other'")
        seconds = (_parse(args["other"], zone_name) - value).total_seconds()
        days, rest = divmod(abs(seconds), 86_400)
        sign = "-" if seconds < 0 else ""
        return ToolOutput(
            text=f"{sign}{int(days)} days {rest / 3600:.4g} hours ({seconds:g} seconds)"
        )
