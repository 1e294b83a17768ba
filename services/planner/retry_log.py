"""The planner's model retries, shown on the log of the workflow they were made for."""

from __future__ import annotations

import logging

from shuttle.events_client import EventsClient
from shuttle.llm.retry_events import RetryReporter
from shuttle.workflow_log import AppendRefused, EventDraft, LogClosed, LogUnavailable

log = logging.getLogger(__name__)

AGENT_ID = "planner"


def retry_reporter(events: EventsClient, workflow_id: str, tenant_id: str) -> RetryReporter:
    """The RetryObserver of one planner call made for one workflow. Each report is appended
    once, and one that cannot be is only logged here, since the planner's answer matters more
    than the report of its retries."""

    async def append(draft: EventDraft) -> None:
        try:
            await events.append_once(workflow_id, tenant_id, [draft], name=AGENT_ID)
        except (LogUnavailable, LogClosed, AppendRefused) as exc:
            log.warning(
                "could not report a retry on the workflow's log: %s",
                exc,
                extra={"workflow_id": workflow_id},
            )

    return RetryReporter(append, AGENT_ID)
