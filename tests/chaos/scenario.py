"""Concurrent runs watched by SSE subscribers, then audited: the frame every fault fits in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import grpc
import httpx

from tests.chaos.harness import RunAudit, audit_run, last_seq, read_log, submit, wait_until
from tests.chaos.subscriber import Stall, Subscription, follow
from tests.support.stack import Stack

# Generous: a loaded two-core machine may take a while, and a wait never slows a passing test.
SUBSCRIBER_GIVE_UP_SECONDS = 240.0


@dataclass
class Scenario:
    client: httpx.AsyncClient
    channel: grpc.aio.Channel
    fallbacks: list[httpx.AsyncClient] = field(default_factory=list)
    """Other gateways a subscriber turns to when its connection is lost."""
    workflow_ids: list[str] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)
    _readers: list[asyncio.Task[Subscription]] = field(default_factory=list)

    async def start_runs(self, count: int, label: str) -> list[str]:
        ids = await asyncio.gather(*(submit(self.client, f"{label} run {n}") for n in range(count)))
        self.workflow_ids += ids
        return list(ids)

    def subscribe(
        self,
        workflow_id: str,
        cut_after: Collection[int] = (),
        stall: Stall | None = None,
    ) -> Subscription:
        sub = Subscription(workflow_id)
        self.subscriptions.append(sub)
        self._readers.append(
            asyncio.create_task(
                follow(
                    self.client,
                    sub,
                    cut_after=cut_after,
                    stall=stall,
                    give_up_after_seconds=SUBSCRIBER_GIVE_UP_SECONDS,
                    fallbacks=self.fallbacks,
                )
            )
        )
        return sub

    def subscribe_to_every_run(self, per_run: int) -> None:
        for workflow_id in self.workflow_ids:
            for _ in range(per_run):
                self.subscribe(workflow_id)

    async def wait_until_mid_run(self) -> None:
        """Until every subscriber has seen a tool observation: each run is under way, with
        more model calls to come."""

        async def every_run_has_used_a_tool() -> bool:
            return all(
                any(e["type"] == "TOOL_OBSERVATION" for e in s.events) for s in self.subscriptions
            )

        await wait_until(every_run_has_used_a_tool, "every run has used a tool")

    async def positions(self) -> dict[str, int]:
        """Each run's last_seq now, from its registry row."""
        seqs = await asyncio.gather(*(last_seq(self.channel, wf) for wf in self.workflow_ids))
        return dict(zip(self.workflow_ids, seqs, strict=True))

    async def finish(
        self, terminal: str = "WORKFLOW_COMPLETED", resumable: bool = False
    ) -> list[RunAudit]:
        """Wait for every subscriber to end (or give up), then audit every run (`resumable`:
        per owner, see harness.py)."""
        await asyncio.gather(*self._readers)
        audits = []
        for workflow_id in self.workflow_ids:
            log = await read_log(self.channel, workflow_id)
            subs = [s for s in self.subscriptions if s.workflow_id == workflow_id]
            final = await last_seq(self.channel, workflow_id)
            audits.append(audit_run(workflow_id, final, log, subs, terminal, resumable))
        return audits

    def cancel(self) -> None:
        for reader in self._readers:
            reader.cancel()


@asynccontextmanager
async def scenario(stack: Stack) -> AsyncIterator[Scenario]:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=20)
    timeout = httpx.Timeout(30.0, read=None)
    async with (
        httpx.AsyncClient(base_url=stack.gateway, timeout=timeout, limits=limits) as client,
        stack.channel("events") as channel,
    ):
        frame = Scenario(client, channel)
        try:
            yield frame
        finally:
            frame.cancel()
