"""DATA_PROCESSING: a tool that worked through data says how much on its run's log.

The report is advisory: a log that does not take it never fails the tool call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from services.tools.catalog import DataProcessed
from shuttle.events_client import EventsClient
from shuttle.workflow_log import EventDraft

log = logging.getLogger(__name__)


class RunLogAppend(Protocol):
    async def append(
        self, workflow_id: str, tenant_id: str, events: Sequence[EventDraft]
    ) -> list[int]: ...


class ToolsProducer:
    """The run's log through the shared events client, each report a batch of its own."""

    def __init__(self, events: EventsClient) -> None:
        self._events = events

    async def append(
        self, workflow_id: str, tenant_id: str, events: Sequence[EventDraft]
    ) -> list[int]:
        return await self._events.append_once(workflow_id, tenant_id, events, name="tools")


def data_processing(
    processed: DataProcessed, tool_name: str, call_id: str, agent_id: str
) -> EventDraft:
    payload = {
        "operation": processed.operation,
        "records_processed": processed.records_processed,
        "total_records": processed.total_records,
        "bytes_processed": processed.bytes_processed,
        "processing_stage": processed.processing_stage,
        "tool_name": tool_name,
        "call_id": call_id,
    }
    amount = (
        f"{processed.records_processed:,} records"
        if processed.records_processed is not None
        else f"{processed.bytes_processed:,} bytes"
    )
    return EventDraft("DATA_PROCESSING", f"{tool_name}: processed {amount}", payload, agent_id)


# A report waits this long at most for the events service: the tool's result must not.
REPORT_TIMEOUT_SECONDS = 2.0


class DataReports:
    """Appends each data tool's DATA_PROCESSING to the log of the run that called it."""

    def __init__(self, run_log: RunLogAppend, timeout_seconds: float = REPORT_TIMEOUT_SECONDS):
        self._log = run_log
        self._timeout = timeout_seconds

    async def report(
        self,
        processed: DataProcessed,
        *,
        workflow_id: str,
        tenant_id: str,
        tool_name: str,
        call_id: str,
        agent_id: str,
    ) -> None:
        if not workflow_id or not tenant_id:
            return  # a call made outside any run (a test, an operator's grpcurl)
        draft = data_processing(processed, tool_name, call_id, agent_id)
        try:
            async with asyncio.timeout(self._timeout):
                await self._log.append(workflow_id, tenant_id, [draft])
        except Exception as exc:
            log.warning(
                "could not report DATA_PROCESSING",
                extra={"workflow_id": workflow_id, "tool_name": tool_name, "error": str(exc)},
            )
