"""Many SSE clients each cut their connection at random events and resume with Last-Event-ID."""

from __future__ import annotations

import random
from statistics import median

import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import assert_clean, record_row
from tests.chaos.scenario import scenario
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

# Cuts fall among the first events of a run's log (the shortest log is longer than this).
CUT_WINDOW = 100


async def test_clients_that_reconnect_at_random_points_get_every_event_once(
    embedded_stack: Stack, scale: Scale
) -> None:
    chance = random.Random(20261130)
    async with scenario(embedded_stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "reconnecting")
        for number in range(scale.reconnecting_clients):
            cuts = chance.sample(range(1, CUT_WINDOW), scale.cuts_per_client)
            chaos.subscribe(ids[number % len(ids)], cut_after=cuts)
        audits = await chaos.finish()

    waits = [w for s in chaos.subscriptions for w in s.resume_waits]
    record_row(
        "reconnecting-clients",
        f"{scale.reconnecting_clients} SSE clients cut at random events, resume by Last-Event-ID",
        scale.name,
        audits,
        chaos.subscriptions,
        max(waits),
        f"longest cut to the resumed stream being accepted (median {median(waits):.2f} s)",
    )
    assert_clean(audits)
    assert all(s.cuts == scale.cuts_per_client for s in chaos.subscriptions)
