"""Retries of model calls: exponential backoff with jitter on 429, 5xx and connection errors,
honouring Retry-After, each retry told to an observer so the run can show it.

The SDK's own `max_retries` retries invisibly, so the client is built with it at 0 and the
retrying happens here (with tenacity).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_exponential_jitter,
)

from shuttle.llm.protocol import RecoveryNotice, RetryNotice, RetryObserver
from shuttle.llm.provider_errors import ALL_FEATURES, refused_feature

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 2
    base_delay_seconds: float = 0.5
    """The first backoff; each further one doubles, plus up to this much random jitter."""
    max_delay_seconds: float = 60.0
    """No wait is longer, whatever the backoff or the provider's Retry-After says."""


def error_type(exc: BaseException) -> str | None:
    """RATE_LIMIT or LLM_ERROR for a failure worth retrying; None for one that is not."""
    if isinstance(exc, openai.RateLimitError):
        return "RATE_LIMIT"
    if refused_feature(exc, ALL_FEATURES) is not None:
        return None  # llama.cpp refuses with a 500, which asking again cannot change
    if isinstance(exc, openai.APIStatusError):
        return "LLM_ERROR" if exc.status_code >= 500 or exc.status_code == 408 else None
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return "LLM_ERROR"
    return None


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a provider asked for: `retry-after-ms`, else `Retry-After` (seconds or date)."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class Retrier:
    """Runs one model call with the policy's retries, reporting each to the observer."""

    def __init__(
        self,
        policy: RetryPolicy,
        observer: RetryObserver | None,
        model: str,
        deadline: float | None = None,
    ) -> None:
        """`deadline` (a `time.monotonic()` instant): no retry is made, or waited for, that
        would start after it."""
        self._policy = policy
        self._observer = observer
        self._model = model
        self._deadline = deadline
        self.out_of_time = False
        """The retries stopped because the deadline came first."""
        self._backoff = wait_exponential_jitter(
            multiplier=policy.base_delay_seconds,
            max=policy.max_delay_seconds,
            jitter=policy.base_delay_seconds,
        )

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc) if exc is not None else None
        delay = asked if asked is not None else self._backoff(state)
        return min(delay, self._policy.max_delay_seconds)

    async def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None or self._observer is None:
            return
        delay = state.next_action.sleep if state.next_action else 0.0
        notice = RetryNotice(
            model=self._model,
            retry_count=state.attempt_number,
            max_retries=self._policy.max_retries,
            error_type=error_type(exc) or "LLM_ERROR",
            message=f"{self._model}: {exc}",
            delay_seconds=delay,
            retry_after=retry_after_seconds(exc),
        )
        await self._notify(self._observer.on_retry(notice))

    async def _recovered(self, attempt: int, exc: BaseException | None, first: str) -> None:
        if self._observer is None or attempt < 2:
            return
        notice = RecoveryNotice(
            model=self._model,
            attempt=attempt,
            max_attempts=self._policy.max_retries + 1,
            error_type=first,
            success=exc is None,
        )
        await self._notify(self._observer.on_recovery(notice))

    @staticmethod
    async def _notify(report: Awaitable[None]) -> None:
        # Reporting is best effort: a broken event sink must not fail the model call.
        try:
            await report
        except Exception:
            log.exception("could not report an LLM retry")

    def _stop(self, state: RetryCallState) -> bool:
        if state.attempt_number > self._policy.max_retries:
            return True
        # Tenacity computes the wait before it asks whether to stop: `upcoming_sleep` is it.
        if self._deadline is None:
            return False
        self.out_of_time = time.monotonic() + state.upcoming_sleep >= self._deadline
        return self.out_of_time

    async def call(self, attempt_fn: Callable[[], Awaitable[T]]) -> T:
        retrying = AsyncRetrying(
            stop=self._stop,
            retry=retry_if_exception(lambda exc: error_type(exc) is not None),
            wait=self._wait,
            before_sleep=self._before_sleep,
            reraise=True,
        )
        first_error = ""
        async for attempt in retrying:
            with attempt:
                number = attempt.retry_state.attempt_number
                try:
                    result = await attempt_fn()
                except Exception as exc:
                    first_error = first_error or (error_type(exc) or "LLM_ERROR")
                    await self._recovered(number, exc, first_error)
                    raise
                await self._recovered(number, None, first_error)
                return result
        raise AssertionError("unreachable: tenacity re-raises the last error")
