"""What the caller asked for survives a takeover: the replica that takes a run over goes on
with the model the task named and the context it gave."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from services.executor.ports import RunRequest
from shuttle.llm.factory import ModelRegistry, RegisteredModel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import ROLES
from tests.executor.conftest import TENANT, Backends, types_of
from tests.executor.test_takeover import QUERY, check_one_run, replica
from tests.support.holding_model import until
from tests.support.takeover_model import TakeoverModel

pytestmark = pytest.mark.integration

CONTEXT = {"team": "blue", "units": "metric"}


@pytest.fixture
def model() -> Iterator[TakeoverModel]:
    started = TakeoverModel(hold_loop_at=2)
    started.start()
    yield started
    started.release()
    started.stop()


def registry(model: TakeoverModel) -> ModelRegistry:
    """The default model and another one, both answered by `model`, told apart by name."""
    default = OpenAIModel(model.base_url, "test-key", "scripted-model", 60.0, 0)
    careful = OpenAIModel(model.base_url, "test-key", "careful-model", 60.0, 0)
    return ModelRegistry(
        [RegisteredModel("main", ROLES, default), RegisteredModel("careful", ("general",), careful)]
    )


async def test_a_run_taken_over_keeps_its_model_and_context(
    backends: Backends, model: TakeoverModel
) -> None:
    a = replica(backends, model, "replica-a", models=registry(model))
    b = replica(backends, model, "replica-b", models=registry(model))
    try:
        workflow_id = await a.start(RunRequest(QUERY, TENANT, model="careful", context=CONTEXT))
        await until(lambda: model.held == 1, "the third model call to be held")
        asked_before = len(model.requests)
        await a.shutdown()
        b.start_takeovers()
        model.release()
        events = await backends.read_log(workflow_id)
    finally:
        await a.shutdown()
        await b.shutdown()

    check_one_run(events)
    assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    after = model.requests[asked_before:]
    assert after, "the replica that took the run over called the model"
    assert {r["model"] for r in model.requests} == {"careful-model"}
    note = json.dumps(CONTEXT, sort_keys=True)
    for request in after:
        assert note in request["messages"][0]["content"]
