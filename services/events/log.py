"""EventLog: the per-workflow ordered log, combining the SQL store and the hot tier."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from datetime import UTC, datetime, timedelta

from shuttle.metrics import EVENTS_APPENDED, SUBSCRIBER_CATCHUPS, SUBSCRIBER_LAG
from shuttle.settings import DEFAULT_EVENTS_MAX_FUTURE_SECONDS as DEFAULT_MAX_FUTURE_SECONDS

from .cuts import leading_run, wanted_part, within_bounds
from .errors import InvalidArgument
from .group_commit import GroupCommitter
from .hot import HotTier
from .lifecycle import close_after_terminal
from .pages import SizedPage
from .payloads import shape_batch, with_full_result
from .records import Appended, AppendRequest, EventPage, NewEvent, StoredEvent, WorkflowRecord
from .store import SqlEventStore
from .validation import (
    check_batch,
    check_epoch,
    check_id,
    check_key,
    check_limit,
    check_producer,
    check_spec,
    check_ttl,
    check_types,
)

log = logging.getLogger(__name__)

# Ids one DeleteWorkflows call may name.
MAX_DELETE_IDS = 1000
# Group commits in flight at once on databases with concurrent writers (PostgreSQL).
WRITER_LANES = 16
# Events fetched per SQL or hot-tier read while replaying a stream, and the most bytes one
# SQL read loads (its first event whatever its size).
REPLAY_PAGE = 500
REPLAY_PAGE_BYTES = 4 * 1024 * 1024
# Polls a waiting stream lets pass before it takes from SQL what the hot tier still lacks.
STALE_POLLS = 2
# The most bytes of events one List page carries (its first event whatever its size).
DEFAULT_LIST_MAX_BYTES = 8 * 1024 * 1024


class EventLog:
    """Appends with gap-free seqs, replays from any seq, and tails live.

    Durable events are committed to SQL before `append` returns, then published to the hot
    tier; ephemeral ones only reach the hot tier. Every call takes the caller's tenant, and
    another tenant's workflow is reported exactly like a missing one.

    `poll_seconds` is for hot tiers that can miss a publish (Redis down, another replica's
    publish refused): a waiting stream then rechecks SQL that often, and reads from SQL what
    the hot tier still lacks one poll later. None waits on the hot tier alone, which suits
    the in-process tier, since every append passes through it.
    """

    def __init__(
        self,
        store: SqlEventStore,
        hot: HotTier,
        *,
        replay_page: int = REPLAY_PAGE,
        replay_page_bytes: int = REPLAY_PAGE_BYTES,
        poll_seconds: float | None = None,
        list_max_bytes: int = DEFAULT_LIST_MAX_BYTES,
        max_future_seconds: float = DEFAULT_MAX_FUTURE_SECONDS,
    ):
        self._store = store
        self._hot = hot
        self._replay_page = replay_page
        self._replay_page_bytes = replay_page_bytes
        self._poll = poll_seconds
        self._list_max_bytes = list_max_bytes
        self._max_future = timedelta(seconds=max_future_seconds)
        # A database taking concurrent writers commits several groups at once, each
        # workflow always in the same lane, so its batches still commit and publish in order.
        lanes = 1 if store.single_writer else WRITER_LANES
        self._lanes = [GroupCommitter(store.append_many, self._publish) for _ in range(lanes)]

    async def create_workflow(
        self,
        *,
        tenant_id: str,
        owner: str = "",
        query: str = "",
        session_id: str = "",
        workflow_id: str = "",
        spec_json: str = "",
        lease_owner: str = "",
        lease_ttl_ms: int = 0,
    ) -> WorkflowRecord:
        """Register a workflow; its id is ``wf-<uuid4>`` unless the caller chose one. With a
        `lease_owner`, leased to it at epoch 1 until now + `lease_ttl_ms`."""
        check_id("tenant_id", tenant_id)
        if workflow_id:
            check_id("workflow_id", workflow_id)
        check_key("session_id", session_id)
        check_spec(spec_json)
        if lease_owner:
            check_id("lease_owner", lease_owner)
            check_ttl("lease_ttl_ms", lease_ttl_ms)
        elif lease_ttl_ms:
            raise InvalidArgument("lease_ttl_ms is set but lease_owner is empty: name the owner")
        return await self._store.create_workflow(
            workflow_id=workflow_id or f"wf-{uuid.uuid4()}",
            tenant_id=tenant_id,
            owner=owner,
            query=query,
            session_id=session_id,
            spec_json=spec_json,
            lease_owner=lease_owner,
            lease_ttl_ms=lease_ttl_ms,
        )

    async def get_workflow(
        self, workflow_id: str, tenant_id: str, *, with_spec: bool = False
    ) -> WorkflowRecord:
        """The workflow's row; its spec_json (megabytes, at times) only `with_spec`."""
        _check_target(workflow_id, tenant_id)
        return await self._store.get_workflow(workflow_id, tenant_id, with_spec=with_spec)

    async def append(
        self,
        workflow_id: str,
        tenant_id: str,
        events: Sequence[NewEvent],
        *,
        producer_id: str = "",
        batch_seq: int = 0,
        lease_epoch: int = 0,
    ) -> list[int]:
        """Append a batch and return its seqs (consecutive, in batch order).

        After a terminal event the log adds STREAM_END itself when the batch lacks it (its
        seq is not among those returned). A repeated (producer_id, batch_seq) returns the
        first call's seqs and stores nothing. A `lease_epoch` other than the workflow's
        (when > 0) is refused with Fenced, storing nothing.
        """
        _check_target(workflow_id, tenant_id)
        check_producer(producer_id, batch_seq)
        check_epoch("lease_epoch", lease_epoch)
        check_batch(events, datetime.now(UTC) + self._max_future)
        batch, added = close_after_terminal(shape_batch(events))
        # Concurrent appends (any workflows) share one transaction; each is published
        # before its call returns, and even if its caller gives up meanwhile.
        appended = await self._lane(workflow_id).submit(
            AppendRequest(workflow_id, tenant_id, batch, producer_id, batch_seq, lease_epoch)
        )
        seqs = appended.seqs
        return seqs if added is None else seqs[:added] + seqs[added + 1 :]

    async def stream(
        self,
        workflow_id: str,
        tenant_id: str,
        from_seq: int = 0,
        types: Collection[str] | None = None,
    ) -> AsyncIterator[StoredEvent]:
        """Events from `from_seq` on, one by one: see `stream_batches`."""
        async for batch in self.stream_batches(workflow_id, tenant_id, from_seq, types):
            for event in batch:
                yield event

    async def stream_batches(
        self,
        workflow_id: str,
        tenant_id: str,
        from_seq: int = 0,
        types: Collection[str] | None = None,
    ) -> AsyncIterator[list[StoredEvent]]:
        """Events from `from_seq` on: replay, then live, ending after STREAM_END; each
        batch is what the log held past the reader when it asked (never empty).

        The cursor walks the hot tier while it holds the cursor's seq and reads SQL for
        anything older, so the switch to live has no gap and no repeat. STREAM_END passes
        any `types` filter, since it is how a reader knows the log is over.
        """
        _check_target(workflow_id, tenant_id)
        wanted = check_types(types)
        record = await self._store.get_workflow(workflow_id, tenant_id)
        cursor = max(from_seq, 1)
        if record.stream_ended and cursor > record.last_seq:
            return  # the reader already has the whole log, STREAM_END included
        stale_polls = 0
        with self._hot.reading(workflow_id):
            while True:
                batch, cursor_after = await self._next_batch(workflow_id, tenant_id, cursor)
                if not batch and cursor_after == cursor:
                    if await self._wait(workflow_id, cursor - 1):
                        stale_polls = 0
                        continue
                    # Nothing arrived within a poll. If SQL holds seqs the hot tier still lacks
                    # a poll later, it missed them: read their durable events from SQL.
                    last_seq = (await self._store.get_workflow(workflow_id, tenant_id)).last_seq
                    stale_polls = stale_polls + 1 if last_seq >= cursor else 0
                    if stale_polls < STALE_POLLS:
                        continue
                    stale_polls = 0
                    page = await self._durable(workflow_id, tenant_id, cursor, last_seq)
                    batch = page.events
                    full_page = page.cut or len(batch) == self._replay_page
                    cursor_after = batch[-1].seq + 1 if full_page else last_seq + 1
                cursor = cursor_after
                selected, ended = wanted_part(batch, wanted)
                if selected:
                    yield selected
                if ended:
                    return
                await self._hot.pace(workflow_id)

    async def delete_workflows(
        self, tenant_id: str, workflow_ids: Sequence[str]
    ) -> tuple[list[str], int]:
        """Delete the tenant's workflows among `workflow_ids` (SQL and hot tier); the ids
        deleted and how many stored events went with them. Unknown or other tenants' ids
        are skipped, so a caller learns nothing about them."""
        check_id("tenant_id", tenant_id)
        if len(workflow_ids) > MAX_DELETE_IDS:
            raise InvalidArgument(
                f"workflow_ids holds {len(workflow_ids)} ids; at most {MAX_DELETE_IDS} per call"
            )
        for workflow_id in workflow_ids:
            check_id("workflow_id", workflow_id)
        deleted, removed = await self._store.delete_workflows(tenant_id, set(workflow_ids))
        for workflow_id in deleted:
            await self._hot.forget(workflow_id)
        return deleted, removed

    async def list_events(
        self,
        workflow_id: str,
        tenant_id: str,
        from_seq: int = 0,
        limit: int = 0,
        types: Collection[str] | None = None,
        full_results: bool = False,
    ) -> EventPage:
        """One page of history: durable events from SQL merged with whatever the hot tier
        holds (ephemeral ones included), so history inside the hot window is complete.
        With `full_results`, cut TOOL_OBSERVATION results come back whole.

        A page stops at `limit` events or where its events' sizes (``sizes.wire_bytes``)
        would pass `list_max_bytes`, whichever comes first; its first event comes whatever
        its size. ``next_seq`` then says where the next page starts."""
        _check_target(workflow_id, tenant_id)
        limit = check_limit(limit)
        wanted = check_types(types)
        start = max(from_seq, 1)
        # One more than the page from each source tells whether another page follows.
        durable = await self._store.events_page(
            workflow_id,
            tenant_id,
            from_seq=start,
            limit=limit + 1,
            max_bytes=self._list_max_bytes,
            types=wanted,
            whole_results=full_results,
        )
        hot = (await self._hot.read(workflow_id, start, limit + 1, wanted)).events
        if durable.cut:
            # SQL holds durable events past the last one read: a hot event beyond it would
            # skip them.
            hot = [event for event in hot if event.seq <= durable.events[-1].seq]
        by_seq = {event.seq: event for event in durable.events}
        by_seq.update((event.seq, event) for event in hot)
        merged = [by_seq[seq] for seq in sorted(by_seq)][: limit + 1]
        if full_results:
            merged = await self._with_full_results(workflow_id, merged)
        page = within_bounds(merged, limit, self._list_max_bytes)
        more = len(page) < len(merged) or durable.cut
        return EventPage(events=page, next_seq=page[-1].seq + 1 if more else 0)

    async def _with_full_results(
        self, workflow_id: str, page: list[StoredEvent]
    ) -> list[StoredEvent]:
        cut = [event.seq for event in page if event.type == "TOOL_OBSERVATION"]
        if not cut:
            return page
        full = await self._store.full_results(workflow_id, cut)
        return [
            with_full_result(event, full[event.seq]) if event.seq in full else event
            for event in page
        ]

    async def _wait(self, workflow_id: str, after_seq: int) -> bool:
        """Wait for the hot tier to hold a seq above `after_seq`; False after a poll."""
        if self._poll is None:
            await self._hot.wait(workflow_id, after_seq)
            return True
        try:
            await asyncio.wait_for(self._hot.wait(workflow_id, after_seq), self._poll)
        except TimeoutError:
            return False
        return True

    async def _publish(self, committed: Sequence[tuple[AppendRequest, Appended]]) -> None:
        """Hand a committed group to the hot tier, each workflow's events in seq order."""
        by_workflow: dict[str, list[StoredEvent]] = {}
        for request, appended in committed:
            if appended.events:
                by_workflow.setdefault(request.workflow_id, []).extend(appended.events)
        # One counter update per type and group: a labelled update per event cost more
        # than publishing the event.
        published = Counter(event.type for events in by_workflow.values() for event in events)
        for event_type, count in published.items():
            EVENTS_APPENDED.labels(event_type).inc(count)
        # Workflows are independent: their publishes (Redis round trips) overlap.
        await asyncio.gather(*(self._publish_one(w, events) for w, events in by_workflow.items()))

    async def _publish_one(self, workflow_id: str, events: list[StoredEvent]) -> None:
        try:
            await self._hot.publish(workflow_id, events)
        except Exception:
            # The batch is committed; failing the call now would make the producer
            # retry into duplicates. Readers find the durable events in SQL.
            log.exception("hot tier publish failed", extra={"workflow_id": workflow_id})

    async def _next_batch(
        self, workflow_id: str, tenant_id: str, cursor: int
    ) -> tuple[list[StoredEvent], int]:
        """Events at `cursor` onwards and the cursor after them (unchanged: nothing yet)."""
        window = await self._hot.read(workflow_id, cursor, self._replay_page)
        if window.covers(cursor):
            if window.events:
                # Everything held past the cursor is what this reader has yet to see.
                SUBSCRIBER_LAG.observe(len(window.events))
            return window.events, window.events[-1].seq + 1 if window.events else cursor
        # The hot tier lacks [cursor, first_seq) (trimmed, evicted, or a restarted service):
        # SQL has the durable events of that range; its ephemeral ones are gone.
        upper = None if window.first_seq is None else window.first_seq - 1
        page = await self._durable(workflow_id, tenant_id, cursor, upper)
        durable = page.events
        if durable:
            SUBSCRIBER_CATCHUPS.inc()
        if upper is None:
            # Nothing was hot, but appends may have started since: whatever the tier holds
            # now is read from it, lest an ephemeral event among them be skipped.
            first_hot = (await self._hot.read(workflow_id, cursor, 0)).first_seq
            if first_hot is not None:
                durable = [event for event in durable if event.seq < first_hot]
            elif self._publish_may_follow(workflow_id, durable):
                # SQL shows a commit whose publish is still to come: past a missing seq
                # (an ephemeral event) the rest waits for the hot tier.
                durable = leading_run(durable, cursor)
            # Nothing at all yet: the caller waits for the next publish.
            return durable, durable[-1].seq + 1 if durable else cursor
        if page.cut or len(durable) == self._replay_page:
            return durable, durable[-1].seq + 1
        return durable, upper + 1  # the whole gap is read: go on from the hot tier

    def _lane(self, workflow_id: str) -> GroupCommitter:
        return self._lanes[hash(workflow_id) % len(self._lanes)]

    def _publish_may_follow(self, workflow_id: str, durable: list[StoredEvent]) -> bool:
        """Whether `durable`, read while the hot tier held nothing of the workflow, may have
        been read between a commit and its publish. In process that is known; a hot tier
        shared by replicas (one with a poll) may still get events committed within a poll
        or two, and any it never gets are read from SQL once the poll finds them stale."""
        if self._lane(workflow_id).unpublished(workflow_id):
            return True
        if self._poll is None or not durable:
            return False
        age = datetime.now(UTC) - durable[-1].timestamp
        return age.total_seconds() < STALE_POLLS * self._poll

    async def _durable(
        self, workflow_id: str, tenant_id: str, cursor: int, upper: int | None
    ) -> SizedPage:
        """One replay page of durable events from SQL, within its count and byte bounds."""
        return await self._store.events_page(
            workflow_id,
            tenant_id,
            from_seq=cursor,
            to_seq=upper,
            limit=self._replay_page,
            max_bytes=self._replay_page_bytes,
        )


def _check_target(workflow_id: str, tenant_id: str) -> None:
    check_id("workflow_id", workflow_id)
    check_id("tenant_id", tenant_id)
