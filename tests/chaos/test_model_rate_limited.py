"""The model answers HTTP 429 to every other call: each call is retried and the run says so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import assert_clean, read_log, record_row
from tests.chaos.model import ChaosModel
from tests.chaos.scenario import scenario
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture
def rate_limited(chaos_model: ChaosModel) -> Iterator[ChaosModel]:
    chaos_model.rate_limit_every_other_call = True
    chaos_model.rate_limited = 0
    yield chaos_model
    chaos_model.rate_limit_every_other_call = False


def seconds_between(earlier: str, later: str) -> float:
    return (datetime.fromisoformat(later) - datetime.fromisoformat(earlier)).total_seconds()


async def test_rate_limited_model_calls_are_retried_and_every_run_completes(
    embedded_stack: Stack, scale: Scale, rate_limited: ChaosModel
) -> None:
    async with scenario(embedded_stack) as chaos:
        ids = await chaos.start_runs(scale.runs, "rate-limited")
        chaos.subscribe_to_every_run(scale.subscribers_per_run)
        audits = await chaos.finish()
        logs = [await read_log(chaos.channel, wf) for wf in ids]

    retry_seconds = []
    reported_rate_limits = 0
    for log in logs:
        errors = [e for e in log if e["type"] == "ERROR_OCCURRED"]
        recoveries = [e for e in log if e["type"] == "ERROR_RECOVERY"]
        reported_rate_limits += sum(e["payload"]["error_type"] == "RATE_LIMIT" for e in errors)
        assert errors, "a run saw no rate limit"
        # A loaded machine may add a retried connection error of its own: also recoverable.
        assert all(e["payload"]["recoverable"] and not e["payload"]["fatal"] for e in errors)
        # Each failed attempt is followed by its retry's report (the run completes: below).
        assert len(recoveries) == len(errors)
        for error in errors:
            recovery = next(r for r in recoveries if r["seq"] > error["seq"])
            retry_seconds.append(seconds_between(error["timestamp"], recovery["timestamp"]))
    # Every 429 the model sent shows on its run's log, once.
    assert reported_rate_limits == rate_limited.rate_limited

    record_row(
        "model-rate-limited",
        "model answers HTTP 429 to every other call",
        scale.name,
        audits,
        chaos.subscriptions,
        max(retry_seconds),
        "longest ERROR_OCCURRED to ERROR_RECOVERY",
    )
    assert_clean(audits)
