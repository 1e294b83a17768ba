"""What the caller asks for is what runs: StartRun's `model` picks a configured model and
its `context_json` reaches the agent; a request naming neither sensibly is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest

from shuttle.llm.factory import ModelRegistry, RegisteredModel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import ROLES
from shuttle.settings import DEFAULT_MAX_BUDGET_TOKENS
from shuttle.v1 import executor_pb2
from tests.executor.conftest import TENANT, Backends, types_of
from tests.support.scripted_openai import ScriptedOpenAI, text

pytestmark = pytest.mark.integration


def llm_for(server: ScriptedOpenAI) -> OpenAIModel:
    return OpenAIModel(server.base_url, "test-key", "scripted-model", 10.0, 0)


@pytest.fixture
def other_model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI().start()
    yield server
    server.stop()


async def test_the_named_model_runs_the_task(
    backends: Backends, model: ScriptedOpenAI, other_model: ScriptedOpenAI
) -> None:
    default, named = llm_for(model), llm_for(other_model)
    registry = ModelRegistry(
        [RegisteredModel("main", ROLES, default), RegisteredModel("careful", ("general",), named)]
    )
    executor, _ = await backends.serve(backends.run_manager(default, models=registry))
    other_model.script(text("Nothing to compute."), text("Nothing to compute, said carefully."))

    started = await executor.StartRun(
        executor_pb2.StartRunRequest(query="Say hello", tenant_id=TENANT, model="careful")
    )

    log = await backends.read_log(started.workflow_id)
    assert types_of(log)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
    assert len(other_model.requests) == 2  # the loop's call and the answer's
    assert model.requests == []


async def test_a_model_that_is_not_configured_is_refused_naming_those_that_are(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    registry = ModelRegistry([RegisteredModel("main", ROLES, llm_for(model))])
    executor, _ = await backends.serve(backends.run_manager(llm_for(model), models=registry))

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await executor.StartRun(
            executor_pb2.StartRunRequest(query="Say hello", tenant_id=TENANT, model="gpt-9")
        )

    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'gpt-9' is not configured here (configured: main)" in str(refused.value.details())
    assert model.requests == []


async def test_the_context_reaches_the_agent_and_the_answer(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    executor, _ = await backends.serve(backends.run_manager(llm_for(model)))
    model.script(text("Bonjour."), text("Bonjour, Ada."))
    context = {"user_name": "Ada", "language": "fr"}

    started = await executor.StartRun(
        executor_pb2.StartRunRequest(
            query="Greet me", tenant_id=TENANT, context_json=json.dumps(context)
        )
    )

    assert types_of(await backends.read_log(started.workflow_id))[-1] == "STREAM_END"
    loop_call, synthesis = model.requests
    for call in (loop_call, synthesis):
        system = call["messages"][0]
        assert system["role"] == "system"
        assert '{"language": "fr", "user_name": "Ada"}' in system["content"]


@pytest.mark.parametrize("context_json", ["[1, 2]", "not json", '"text"'])
async def test_a_context_that_is_not_an_object_is_refused(
    backends: Backends, model: ScriptedOpenAI, context_json: str
) -> None:
    executor, _ = await backends.serve(backends.run_manager(llm_for(model)))

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await executor.StartRun(
            executor_pb2.StartRunRequest(query="q", tenant_id=TENANT, context_json=context_json)
        )

    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "context_json must be a JSON object" in str(refused.value.details())
    assert model.requests == []


async def test_a_budget_over_the_deployments_ceiling_is_refused_naming_it(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    executor, _ = await backends.serve(backends.run_manager(llm_for(model)))

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await executor.StartRun(
            executor_pb2.StartRunRequest(
                query="Say hello", tenant_id=TENANT, budget_tokens=DEFAULT_MAX_BUDGET_TOKENS + 1
            )
        )

    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(refused.value.details()) == (
        f"budget_tokens is {DEFAULT_MAX_BUDGET_TOKENS + 1}; at most {DEFAULT_MAX_BUDGET_TOKENS} "
        f"are allowed (SHUTTLE_MAX_BUDGET_TOKENS={DEFAULT_MAX_BUDGET_TOKENS})"
    )
    assert model.requests == []
    # The ceiling itself is a budget like any other, and the executor goes on serving.
    model.script(text("Hello."), text("Hello there."))
    started = await executor.StartRun(
        executor_pb2.StartRunRequest(
            query="Say hello", tenant_id=TENANT, budget_tokens=DEFAULT_MAX_BUDGET_TOKENS
        )
    )
    assert types_of(await backends.read_log(started.workflow_id))[-2:] == [
        "WORKFLOW_COMPLETED",
        "STREAM_END",
    ]
