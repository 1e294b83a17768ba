"""Structured logs: one JSON object per line on stderr (or plain text for humans), each
carrying the active trace id and the workflow being worked on."""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

current_workflow: ContextVar[str] = ContextVar("current_workflow", default="")
"""Set by code working on one workflow; asyncio tasks it starts inherit it."""


class _RunContext(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        span = trace.get_current_span().get_span_context()
        if not getattr(record, "trace_id", ""):
            record.trace_id = format(span.trace_id, "032x") if span.is_valid else ""
        if not getattr(record, "workflow_id", ""):
            record.workflow_id = current_workflow.get()
        return True


def configure_logging(service: str, level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RunContext())
    if fmt == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s %(trace_id)s %(workflow_id)s",
                rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
                static_fields={"service": service},
            )
        )
    else:
        handler.setFormatter(
            logging.Formatter(
                f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s "
                "[wf=%(workflow_id)s trace=%(trace_id)s]"
            )
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Request-level chatter from the HTTP client would drown the run's own lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
