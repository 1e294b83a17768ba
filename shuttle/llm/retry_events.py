"""How a model call's retries read on a workflow's log, for every service that makes one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from shuttle.llm.protocol import FallbackNotice, RecoveryNotice, RetryNotice
from shuttle.workflow_log import EventDraft

FEATURE_UNSUPPORTED = "FEATURE_UNSUPPORTED"


def retry_event(notice: RetryNotice, agent_id: str) -> EventDraft:
    """ERROR_OCCURRED, recoverable: the call failed and will be tried again."""
    payload = {
        "error_type": notice.error_type,
        "error_message": notice.message,
        "recoverable": True,
        "fatal": False,
        "retry_count": notice.retry_count,
        "max_retries": notice.max_retries,
        "retry_after": notice.retry_after,
        "delay_ms": int(notice.delay_seconds * 1000),
        "model": notice.model,
    }
    return EventDraft("ERROR_OCCURRED", notice.message[:200], payload, agent_id)


def recovery_event(notice: RecoveryNotice, agent_id: str) -> EventDraft:
    """ERROR_RECOVERY: how the retried attempt went."""
    payload = {
        "error_type": notice.error_type,
        "recovery_action": "retry",
        "attempt": notice.attempt,
        "max_attempts": notice.max_attempts,
        "success": notice.success,
        "model": notice.model,
    }
    outcome = "succeeded" if notice.success else "failed"
    message = f"LLM retry {notice.attempt}/{notice.max_attempts} {outcome}"
    return EventDraft("ERROR_RECOVERY", message, payload, agent_id)


def fallback_event(notice: FallbackNotice, agent_id: str) -> EventDraft:
    """ERROR_RECOVERY: the endpoint refused a feature and the call goes on without it."""
    payload = {
        "error_type": FEATURE_UNSUPPORTED,
        "recovery_action": notice.action,
        "feature": notice.feature,
        "error_message": notice.message,
        "success": True,
        "model": notice.model,
    }
    message = f"{notice.model}: no {notice.feature} at this endpoint, going on in {notice.action}"
    return EventDraft("ERROR_RECOVERY", message[:200], payload, agent_id)


class RetryReporter:
    """The RetryObserver of one agent's model calls: each retry and its outcome go to the
    workflow's log through `emit`."""

    def __init__(self, emit: Callable[[EventDraft], Awaitable[None]], agent_id: str) -> None:
        self._emit = emit
        self._agent_id = agent_id

    async def on_retry(self, notice: RetryNotice) -> None:
        await self._emit(retry_event(notice, self._agent_id))

    async def on_recovery(self, notice: RecoveryNotice) -> None:
        await self._emit(recovery_event(notice, self._agent_id))

    async def on_fallback(self, notice: FallbackNotice) -> None:
        await self._emit(fallback_event(notice, self._agent_id))
