"""The runs of an executor process append over one EventService.AppendStream call."""

from __future__ import annotations

from typing import Any

from services.executor.runs import RunRequest
from shuttle.llm.openai_model import OpenAIModel
from shuttle.metrics import APPEND_STREAMS, GRPC_SECONDS
from tests.executor.conftest import TENANT, Backends, types_of
from tests.support.scripted_openai import ScriptedOpenAI, text

RUNS = 3


def gauge(metric: Any) -> float:
    return float(metric.collect()[0].samples[0].value)


def unary_appends() -> float:
    """Append calls the events service of this process has answered."""
    return sum(
        sample.value
        for metric in GRPC_SECONDS.collect()
        for sample in metric.samples
        if sample.name.endswith("_count")
        and sample.labels["method"] == "/shuttle.v1.EventService/Append"
    )


async def test_the_runs_of_a_process_append_over_one_call(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(*[text("Nothing to compute.") for _ in range(2 * RUNS)])
    streams, appends = gauge(APPEND_STREAMS), unary_appends()
    llm = OpenAIModel(model.base_url, "test-key", "scripted-model", 10.0, 0)
    runs = backends.run_manager(llm, completion_check=False, reflection_interval=0)
    started = [
        await runs.start(RunRequest(query="Say hello", tenant_id=TENANT)) for _ in range(RUNS)
    ]

    for workflow_id in started:
        events = await backends.read_log(workflow_id)
        assert types_of(events)[-2:] == ["WORKFLOW_COMPLETED", "STREAM_END"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert gauge(APPEND_STREAMS) == streams + 1
    assert unary_appends() == appends
    await runs.shutdown(1)
