"""The takeover matrix on the embedded stack (SQLite, in-process hot tier) under the real
`shuttle up`: its one executor is killed (-9) at a point of the run, `shuttle up` starts it
again, and the restarted executor takes the run over and ends it as an uninterrupted run of
the same script ends. The reduced form (CHAOS_SCALE=ci) tries two points; `make chaos`
every one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.conftest import SCALE, Scale
from tests.chaos.harness import assert_clean
from tests.chaos.takeover import Kit
from tests.chaos.takeover_points import POINTS, record_point, run_point
from tests.chaos.takeover_stacks import UpStack, shuttle_up
from tests.support.replicated_stack import model_environment

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@pytest.fixture(scope="module")
def up_stack(takeover_kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    data_dir = Path(tmp_path_factory.mktemp("chaos-shuttle-up"))
    workspaces = data_dir / "workspaces"
    environment = model_environment(takeover_kit.model.base_url)
    with shuttle_up(data_dir, environment, takeover_kit.environment(workspaces)) as stack:
        yield stack


@pytest.fixture(autouse=True)
def released(takeover_kit: Kit) -> Iterator[None]:
    yield
    takeover_kit.release_all()


@pytest.mark.parametrize("point", SCALE.embedded_points)
async def test_a_run_outlives_its_only_executor_restarted_by_shuttle_up(
    up_stack: UpStack, takeover_kit: Kit, scale: Scale, point: str
) -> None:
    kill_point = POINTS[point]()
    outcome = await run_point(up_stack, takeover_kit, kill_point, scale.takeover_runs, 1)
    record_point(up_stack, kill_point, outcome, scale.name)
    assert outcome.problems == {wf: [] for wf in outcome.problems}, outcome.problems
    assert_clean(outcome.audits)
