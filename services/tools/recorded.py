"""Tool calls that take effect once: each (workflow id, call id) runs once, its outcome is
recorded in the ledger, and a repeat is answered from there.

- First call: the row is inserted as running, then the call runs (hooks, approvals, the
  tool) in a task of its own, detached from the RPC: a caller that goes away (its executor
  killed, the RPC cancelled) leaves it running, and its outcome is recorded all the same.
- Repeat while it runs on this replica: it awaits the same task. On another replica
  (several sharing the database): it polls the row until the outcome is there.
- Repeat once done: the recorded outcome, without hooks or the tool.
- A row left running by a replica that is gone (its process died mid-call) is taken over
  once it has been running `STALE_GRACE_SECONDS` longer than the call could take on a live
  replica (the tool's timeout plus its approval waits): the call then runs again, so for
  this one case a call is at least once, not exactly once.
- A repeat naming another tenant, tool or arguments under a known id is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from services.tools.host import ToolHost
from services.tools.ledger import CallLedger, Fingerprint, LedgerEntry
from shuttle.tool_calls import ToolCall, ToolOutcome

log = logging.getLogger(__name__)

# How much longer than its tool's timeout plus approval waits a row must stay running before
# its replica is taken for gone: hooks, the outcome's write and clocks apart between replicas.
STALE_GRACE_SECONDS = 60.0
# A repeat of a call another replica runs reads its row this often (doubling to the most).
POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 0.5
# How long writing an outcome is retried (the database briefly away) before giving up on it.
RECORD_RETRY_SECONDS = 10.0

_Key = tuple[str, str]
# None: another replica holds the call (the row was there); its outcome is polled for.
_Run = asyncio.Task[ToolOutcome | None]


class CallMismatch(Exception):
    """A repeat under a known call id names another tenant, tool or arguments."""


class LedgerUnavailable(Exception):
    """The ledger could not be read or written; the call was not run."""


def replica_name() -> str:
    """This process as the ledger names a call's runner: host (a pod's name), pid and a
    random part, since a restarted container reuses both."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:128]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _check(recorded: Fingerprint, call: ToolCall, repeat: Fingerprint) -> None:
    if recorded == repeat:
        return
    known = f"call id {call.call_id!r} of workflow {call.workflow_id!r}"
    rule = "a repeated call id must name the same tool and arguments; use a new call id"
    if recorded.tenant_id != repeat.tenant_id:
        raise CallMismatch(f"{known} is already recorded for another call; {rule}")
    if recorded.tool_name != repeat.tool_name:
        raise CallMismatch(
            f"{known} already ran tool {recorded.tool_name!r}, not {repeat.tool_name!r}; {rule}"
        )
    raise CallMismatch(f"{known} already ran {recorded.tool_name!r} with other arguments; {rule}")


@dataclass(eq=False)
class _InFlight:
    """A call this replica is claiming (its row not yet its own) or running."""

    fingerprint: Fingerprint
    claimed: bool = False
    task: _Run | None = None

    @property
    def run(self) -> _Run:
        assert self.task is not None  # set as it is launched
        return self.task


class RecordedCalls:
    """ToolHost.execute behind the ledger, for calls with a workflow id and a call id."""

    def __init__(
        self,
        host: ToolHost,
        ledger: CallLedger,
        *,
        replica: str = "",
        stale_grace_seconds: float = STALE_GRACE_SECONDS,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._host = host
        self._ledger = ledger
        self._replica = replica or replica_name()
        self._grace = stale_grace_seconds
        self._clock = clock
        self._in_flight: dict[_Key, _InFlight] = {}

    @property
    def replica(self) -> str:
        return self._replica

    async def execute(self, call: ToolCall) -> ToolOutcome:
        """The call's outcome, run here at most once per replica attempt; raises
        CallMismatch and LedgerUnavailable."""
        if not (call.workflow_id and call.call_id):
            return await self._host.execute(call)
        fingerprint = Fingerprint.of(call)
        key = (call.workflow_id, call.call_id)
        stale: LedgerEntry | None = None
        while True:
            running = self._in_flight.get(key)
            if running is None:
                running = self._launch(key, call, fingerprint, stale)
            elif running.fingerprint != fingerprint:
                if running.claimed:
                    _check(running.fingerprint, call, fingerprint)  # raises: another call
                # A differing repeat is only trying its claim: the row will tell who is right.
                with contextlib.suppress(Exception):
                    await asyncio.shield(running.run)
                continue
            # Shielded: the caller going away must not cancel the call.
            outcome = await asyncio.shield(running.run)
            if outcome is not None:
                return replace(outcome, call_id=call.call_id)
            found = await self._await_recorded(call, fingerprint)
            if isinstance(found, ToolOutcome):
                return replace(found, call_id=call.call_id)
            stale = found  # to take over; None: the row went (the workflow was forgotten)

    def _launch(
        self, key: _Key, call: ToolCall, fingerprint: Fingerprint, stale: LedgerEntry | None
    ) -> _InFlight:
        running = _InFlight(fingerprint)
        task = asyncio.create_task(
            self._claim_and_run(call, running, stale), name=f"tool-call {call.call_id}"
        )
        running.task = task
        self._in_flight[key] = running

        def finished(done: _Run) -> None:
            if self._in_flight.get(key) is running:
                del self._in_flight[key]
            if not done.cancelled():
                done.exception()  # retrieved: its callers may all have gone

        task.add_done_callback(finished)
        return running

    async def _claim_and_run(
        self, call: ToolCall, running: _InFlight, stale: LedgerEntry | None
    ) -> ToolOutcome | None:
        now = self._clock()
        try:
            if stale is None:
                await self._ledger.start(call, running.fingerprint, self._replica, now)
            elif await self._ledger.take_over(call, stale, self._replica, now):
                log.warning(
                    "taking over a tool call its replica left running; it runs again",
                    extra={
                        "workflow_id": call.workflow_id,
                        "call_id": call.call_id,
                        "tool_name": call.tool_name,
                        "previous_replica": stale.replica,
                        "attempt": stale.attempt + 1,
                    },
                )
            else:
                return None  # another replica took it over first
        except IntegrityError:
            return None  # the call id is known: a repeat
        except SQLAlchemyError as exc:
            raise LedgerUnavailable(
                f"the tool-call ledger is unavailable ({type(exc).__name__}); "
                f"{call.tool_name!r} was not run, so the call may be sent again"
            ) from exc
        running.claimed = True
        outcome = await self._host.execute(call)
        await self._record(call, outcome)
        return outcome

    async def _record(self, call: ToolCall, outcome: ToolOutcome) -> None:
        try:
            await self._ledger.finish(call, outcome, self._clock())
            return
        except SQLAlchemyError as exc:
            log.warning("could not record a tool call's outcome; retrying", exc_info=exc)
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(SQLAlchemyError),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            stop=stop_after_delay(RECORD_RETRY_SECONDS),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._ledger.finish(call, outcome, self._clock())
        except SQLAlchemyError:
            # The caller still gets the outcome; a repeat finds the row running and, once it
            # is stale, runs the call again.
            log.exception(
                "could not record a tool call's outcome",
                extra={"workflow_id": call.workflow_id, "call_id": call.call_id},
            )

    async def _await_recorded(
        self, call: ToolCall, fingerprint: Fingerprint
    ) -> ToolOutcome | LedgerEntry | None:
        """Poll the row: its outcome once done, the row once stale, None if it is gone."""
        delay = POLL_FIRST_SECONDS
        while True:
            try:
                entry = await self._ledger.get(call)
            except SQLAlchemyError as exc:
                raise LedgerUnavailable(
                    f"the tool-call ledger is unavailable ({type(exc).__name__}); "
                    f"whether call {call.call_id!r} ran is not known yet, so send it again"
                ) from exc
            if entry is None:
                return None
            _check(entry.fingerprint, call, fingerprint)
            if entry.outcome is not None:
                return entry.outcome
            if self._stale(entry, call):
                return entry
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX_SECONDS)

    def _stale(self, entry: LedgerEntry, call: ToolCall) -> bool:
        if entry.replica == self._replica:
            # Ours, yet not in flight here: its outcome could not be written.
            return (call.workflow_id, call.call_id) not in self._in_flight
        longest = self._host.longest_run(call.tool_name, call.tenant_id) + self._grace
        return self._clock() >= entry.started_at + timedelta(seconds=longest)

    async def close(self, grace_seconds: float) -> None:
        """Let calls still running (their callers may be gone) finish within the grace; any
        left then is cancelled, its row left running for a repeat to take over."""
        tasks = [running.run for running in self._in_flight.values()]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_seconds)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
