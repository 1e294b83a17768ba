"""How a run's log is ended, whatever ended the run: a fatal error, or the last batch, then
STREAM_END, so that every subscriber learns the run is over and why."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from services.executor.log.emitter import EmitterFailed
from services.executor.log.reporter import RunReporter
from shuttle.metrics import RUNS_FINISHED

# Under the run manager's name: these are the lines that say how a run ended.
log = logging.getLogger("services.executor.runs")


async def fail(
    reporter: RunReporter,
    workflow_id: str,
    error_type: str,
    message: str,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """End the log with a fatal ERROR_OCCURRED naming `error_type`, then STREAM_END."""
    RUNS_FINISHED.labels("failed").inc()
    log.warning("run failed: %s", message, extra={"error_type": error_type})
    try:
        await reporter.error(error_type, message, fatal=True, extra=extra)
    except Exception:
        log.exception("could not record the failure", extra={"workflow_id": workflow_id})
    await close(reporter, workflow_id)


async def close(reporter: RunReporter, workflow_id: str) -> None:
    """STREAM_END, once everything the run emitted is in the log."""
    try:
        await reporter.stream_end()
        await reporter.flush()
    except EmitterFailed as lost:
        log.exception("could not close the log", extra={"workflow_id": workflow_id})
        if lost.refused:
            await end_refused_log(reporter, lost)
    except Exception:
        log.exception("could not close the log", extra={"workflow_id": workflow_id})


async def end_refused_log(reporter: RunReporter, lost: EmitterFailed) -> None:
    """After the log refused one of the run's batches, end it with the reason, so that its
    subscribers learn why rather than wait for events that will never come."""
    last_words = reporter.successor()
    try:
        await last_words.error("INTERNAL", str(lost), fatal=True)
        await last_words.stream_end()
        await last_words.flush()
    except Exception:
        log.exception("could not record the failure")
