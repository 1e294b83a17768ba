"""The takeover matrix on three executors (PostgreSQL, Redis): the executor holding a run's
lease is killed (-9) at each point of the run, and another replica takes the run over and
ends it as an uninterrupted run of the same script ends (see takeover.py for every check)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.conftest import Scale
from tests.chaos.harness import assert_clean
from tests.chaos.takeover import Kit
from tests.chaos.takeover_points import POINTS, record_point, run_point
from tests.chaos.takeover_stacks import ReplicatedTarget

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture(autouse=True)
def released(takeover_kit: Kit, takeover_replicas: ReplicatedTarget) -> Iterator[None]:
    """Whatever a failed test left held is let go, and every executor is back."""
    yield
    takeover_kit.release_all()
    takeover_replicas.revive()


@pytest.mark.parametrize("point", list(POINTS))
async def test_a_run_outlives_the_executor_killed_at_each_point(
    takeover_replicas: ReplicatedTarget, takeover_kit: Kit, scale: Scale, point: str
) -> None:
    kill_point = POINTS[point]()
    outcome = await run_point(
        takeover_replicas, takeover_kit, kill_point, scale.takeover_runs, subscribers=1
    )
    record_point(takeover_replicas, kill_point, outcome, scale.name)
    assert outcome.problems == {wf: [] for wf in outcome.problems}, outcome.problems
    assert_clean(outcome.audits)
