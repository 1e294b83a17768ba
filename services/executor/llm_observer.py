"""Shows a run's LLM retries on its log: ERROR_OCCURRED (recoverable), then ERROR_RECOVERY."""

from __future__ import annotations

from services.executor.reporter import RunReporter
from shuttle.llm.protocol import RecoveryNotice, RetryNotice


class RunRetryObserver:
    """The `RetryObserver` of one agent of one run."""

    def __init__(self, reporter: RunReporter, agent_id: str) -> None:
        self._reporter = reporter
        self._agent_id = agent_id

    async def on_retry(self, notice: RetryNotice) -> None:
        await self._reporter.llm_retry(self._agent_id, notice)

    async def on_recovery(self, notice: RecoveryNotice) -> None:
        await self._reporter.llm_recovery(self._agent_id, notice)
