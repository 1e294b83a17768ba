"""Group commit: appends that arrive while a transaction is committing share the next one.

A single writer task takes everything queued, commits it as one transaction (one fsync,
one round trip per table instead of per batch), hands the committed events to `publish`
in commit order, and only then answers each caller. Throughput then grows with the number
of concurrent appends instead of being capped by commits per second, while a lone append
still commits at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from .append_tx import Outcome
from .records import Appended, AppendRequest

log = logging.getLogger(__name__)

Commit = Callable[[Sequence[AppendRequest]], Awaitable[list[Outcome]]]
Publish = Callable[[Sequence[tuple[AppendRequest, Appended]]], Awaitable[None]]

# Bounds on one transaction's size, not on the wait (nothing waits for a group to fill).
MAX_GROUP = 256
MAX_GROUP_EVENTS = 5_000


class GroupCommitter:
    """Queues appends and commits them in groups, one group at a time, in arrival order."""

    def __init__(self, commit: Commit, publish: Publish, *, max_group: int = MAX_GROUP) -> None:
        self._commit = commit
        self._publish = publish
        self._max_group = max_group
        self._pending: list[tuple[AppendRequest, asyncio.Future[Appended]]] = []
        self._writer: asyncio.Task[None] | None = None
        # Workflows of the group being committed and published (one group at a time): SQL
        # may already show its events to a reader while the hot tier has yet to get them.
        self._unpublished: frozenset[str] = frozenset()

    def unpublished(self, workflow_id: str) -> bool:
        """Whether a batch of the workflow is committing or committed but not yet published."""
        return workflow_id in self._unpublished

    async def submit(self, request: AppendRequest) -> Appended:
        """Commit and publish `request` with whatever else is queued; its outcome.

        A caller that gives up waiting does not withdraw the batch: it is committed and
        published all the same, so live subscribers never miss a committed event.
        """
        future: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
        # Read the outcome even when the caller left, so it is never reported as lost.
        future.add_done_callback(_retrieve)
        self._pending.append((request, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name="events-group-commit")
        return await asyncio.shield(future)

    async def _write(self) -> None:
        try:
            while self._pending:
                await self._commit_group(self._next_group())
        finally:
            self._writer = None

    def _next_group(self) -> list[tuple[AppendRequest, asyncio.Future[Appended]]]:
        """The oldest queued batches, up to `max_group` of them or MAX_GROUP_EVENTS events."""
        taken = events = 0
        for request, _ in self._pending[: self._max_group]:
            if taken and events + len(request.batch) > MAX_GROUP_EVENTS:
                break
            taken += 1
            events += len(request.batch)
        group = self._pending[:taken]
        del self._pending[:taken]
        return group

    async def _commit_group(
        self, group: list[tuple[AppendRequest, asyncio.Future[Appended]]]
    ) -> None:
        requests = [request for request, _ in group]
        self._unpublished = frozenset(request.workflow_id for request in requests)
        try:
            await self._commit_and_publish(group, requests)
        finally:
            self._unpublished = frozenset()

    async def _commit_and_publish(
        self,
        group: list[tuple[AppendRequest, asyncio.Future[Appended]]],
        requests: list[AppendRequest],
    ) -> None:
        try:
            outcomes: Sequence[Outcome | BaseException] = await self._commit(requests)
        except Exception as failed:  # the database failed the whole group
            outcomes = [failed] * len(group)
        committed = [
            (request, outcome)
            for request, outcome in zip(requests, outcomes, strict=True)
            if isinstance(outcome, Appended)
        ]
        if committed:
            try:
                await self._publish(committed)
            except Exception:
                # Committed all the same: failing the calls now would make producers retry
                # into repeats. Readers find the durable events in SQL.
                log.exception("publishing committed events failed")
        for (_, future), outcome in zip(group, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, Appended):
                future.set_result(outcome)
            else:
                future.set_exception(outcome)


def _retrieve(future: asyncio.Future[Appended]) -> None:
    if not future.cancelled():
        future.exception()
