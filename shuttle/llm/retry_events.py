"""How a model call's retries read on a workflow's log, for every service that makes one."""

from __future__ import annotations

from typing import Any

from shuttle.llm.protocol import RecoveryNotice, RetryNotice

LogEntry = tuple[str, str, dict[str, Any]]
"""(event type, message, payload)."""


def retry_entry(notice: RetryNotice) -> LogEntry:
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
    return "ERROR_OCCURRED", notice.message[:200], payload


def recovery_entry(notice: RecoveryNotice) -> LogEntry:
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
    return "ERROR_RECOVERY", f"LLM retry {notice.attempt}/{notice.max_attempts} {outcome}", payload
