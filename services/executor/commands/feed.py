"""The owning runs follow their logs for commands: control events and user interrupts.

Any replica may append them, so that no command has to be routed to the replica running the
workflow; this is how that replica sees them. One feed per process carries the commands of
every run it owns: a stream per run would hold a gRPC call's memory for the whole run. A
broken feed (an events service restart) is opened again and every run watched again from the
seq after the last one it received. With nothing left to watch it stays open a while for the
next run: opening the call costs both processes more than a run's own watch.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.executor.policies.control import RunControl
from services.executor.policies.interrupts import InterruptInbox
from shuttle.envelope import CONTROL_EVENT_TYPES
from shuttle.workflow_log import (
    FeedItem,
    LogCommand,
    LogUnavailable,
    Unwatch,
    Watch,
    WatchRequest,
)

log = logging.getLogger(__name__)

RECONNECT_FIRST_SECONDS = 0.05
RECONNECT_MAX_SECONDS = 1.0
# How long a feed with no run left to watch stays open. Closed at once, it made runs one
# after another each open a FollowCommands call of their own: 0.3 to 1.0 ms of CPU per K = 1
# run across the executor and the events service (`python -m bench.suites.run_cpu`).
IDLE_CLOSE_SECONDS = 30.0


class CommandSource(Protocol):
    def follow_commands(self, requests: AsyncIterator[WatchRequest]) -> AsyncIterator[FeedItem]:
        """One session: the command events of each watched workflow, live, until `requests`
        ends and every watch is over."""
        ...


class RunReceiver:
    """Where one run's commands land, whichever path brings them (each taken once by seq)."""

    def __init__(self) -> None:
        self.control = RunControl()
        self.interrupts = InterruptInbox()

    def restore(
        self,
        controls: Sequence[LogCommand],
        follow_ups: Sequence[tuple[int, str]],
        taken: Collection[int],
    ) -> None:
        """What a run taken over had received, read back from its log: control commands
        (and its own WORKFLOW_PAUSED), the user's follow-ups and which it had taken."""
        for command in controls:
            self.control.apply(command.seq, command.type, str(command.payload.get("reason") or ""))
        self.interrupts.restore(follow_ups, taken)

    def deliver(self, command: LogCommand) -> None:
        if command.type == "MESSAGE_RECEIVED":
            if command.payload.get("from") == "user":
                self.interrupts.deliver(command.seq, str(command.payload.get("content") or ""))
        elif command.type in CONTROL_EVENT_TYPES:
            reason = str(command.payload.get("reason") or "")
            self.control.apply(command.seq, command.type, reason)


@dataclass
class _Watched:
    tenant_id: str
    receiver: RunReceiver
    next_seq: int = 1


class CommandFeed:
    """The commands of every registered run over one session, opened on the first
    registration and closed once nothing has been registered for `idle_close_seconds`."""

    def __init__(
        self, source: CommandSource, idle_close_seconds: float = IDLE_CLOSE_SECONDS
    ) -> None:
        self._source = source
        self._idle_close_seconds = idle_close_seconds
        self._watched: dict[str, _Watched] = {}
        self._requests: asyncio.Queue[WatchRequest | None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def watched(self) -> int:
        return len(self._watched)

    def register(
        self, workflow_id: str, tenant_id: str, receiver: RunReceiver, from_seq: int = 1
    ) -> None:
        """Watch the run's commands from `from_seq` (a run taken over has read those
        before it from the log already)."""
        self._watched[workflow_id] = _Watched(tenant_id, receiver, from_seq)
        self._stop_idle_timer()
        if self._requests is not None:
            self._requests.put_nowait(Watch(workflow_id, tenant_id, from_seq))
        if self._task is None:
            # A context of its own: the feed outlives the request whose run opened it.
            self._task = asyncio.create_task(
                self._run(), name="command-feed", context=contextvars.Context()
            )

    def unregister(self, workflow_id: str) -> None:
        if self._watched.pop(workflow_id, None) is not None and self._requests is not None:
            self._requests.put_nowait(Unwatch(workflow_id))
        self._close_if_idle()

    async def close(self) -> None:
        self._stop_idle_timer()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _close_if_idle(self) -> None:
        if self._watched or self._requests is None or self._idle_timer is not None:
            return
        if self._idle_close_seconds <= 0:
            self._close_now()
        else:
            self._idle_timer = asyncio.get_running_loop().call_later(
                self._idle_close_seconds, self._close_now
            )

    def _close_now(self) -> None:
        self._idle_timer = None
        if not self._watched and self._requests is not None:
            self._requests.put_nowait(None)
            self._requests = None

    def _stop_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    async def _run(self) -> None:
        delay = RECONNECT_FIRST_SECONDS
        while self._watched:
            requests: asyncio.Queue[WatchRequest | None] = asyncio.Queue()
            for workflow_id, watched in self._watched.items():
                requests.put_nowait(Watch(workflow_id, watched.tenant_id, watched.next_seq))
            self._requests = requests
            try:
                async for item in self._source.follow_commands(_drain(requests)):
                    delay = RECONNECT_FIRST_SECONDS
                    self._take(item)
                if self._requests is None:
                    continue  # closed for being idle; a registration since opens it again
                log.info("command feed ended by the events service, opening it again")
            except LogUnavailable as exc:
                log.info("command feed interrupted, opening it again", extra={"error": str(exc)})
            except Exception:
                log.exception("command feed failed, opening it again")
            self._requests = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)
        self._task = None

    def _take(self, item: FeedItem) -> None:
        watched = self._watched.get(item.workflow_id)
        if watched is None:
            return  # unregistered while the item was on its way
        for command in item.commands:
            if command.seq >= watched.next_seq:
                watched.receiver.deliver(command)
                watched.next_seq = command.seq + 1
        if item.error and item.retryable:
            asyncio.get_running_loop().call_later(
                RECONNECT_MAX_SECONDS, self._watch_again, item.workflow_id
            )
        elif item.error or item.ended:
            if item.error:
                # The run goes on; only commands from other replicas are lost to it.
                log.warning(
                    "cannot follow the log for commands: %s",
                    item.error,
                    extra={"workflow_id": item.workflow_id},
                )
            del self._watched[item.workflow_id]
            self._close_if_idle()

    def _watch_again(self, workflow_id: str) -> None:
        watched = self._watched.get(workflow_id)
        if watched is not None and self._requests is not None:
            self._requests.put_nowait(Watch(workflow_id, watched.tenant_id, watched.next_seq))


async def _drain(requests: asyncio.Queue[WatchRequest | None]) -> AsyncIterator[WatchRequest]:
    while (request := await requests.get()) is not None:
        yield request
