"""Metrics and logs of a real run, read the way an operator's tools read them."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.models import arithmetic_model
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import read_stream
from tests.support.stack import free_ports, start_stack

pytestmark = pytest.mark.integration


def samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(url, timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_metrics_and_logs_describe_the_run(tmp_path: Path) -> None:
    model = ScriptedOpenAI(handler=arithmetic_model).start()
    executor_metrics, events_metrics = free_ports(2)
    stack = start_stack(
        tmp_path,
        model.base_url,
        process_env={
            "executor": {"SHUTTLE_METRICS_PORT": str(executor_metrics)},
            "events": {"SHUTTLE_METRICS_PORT": str(events_metrics)},
        },
    )
    try:
        workflow_id = httpx.post(
            f"{stack.gateway}/api/v1/tasks", json={"query": "What is 6*7?"}, timeout=30
        ).json()["workflow_id"]
        status, frames = read_stream(stack.gateway, f"/api/v1/stream/sse?workflow_id={workflow_id}")
        assert status == 200 and frames[-1].event == "STREAM_END"

        executor = samples(f"http://127.0.0.1:{executor_metrics}/metrics")
        assert value(executor, "shuttle_runs_started_total") == 1
        assert value(executor, "shuttle_runs_finished_total", status="completed") == 1
        assert value(executor, "shuttle_llm_calls_total", model="scripted-model", outcome="ok") == 3
        assert value(executor, "shuttle_tool_calls_total", tool="calculator", outcome="ok") == 1
        assert value(executor, "shuttle_run_iterations_count") == 1
        assert (
            value(
                executor,
                "shuttle_grpc_server_handling_seconds_count",
                method="/shuttle.v1.ExecutorService/StartRun",
                code="OK",
            )
            == 1
        )
        events = samples(f"http://127.0.0.1:{events_metrics}/metrics")
        appends = value(
            events,
            "shuttle_grpc_server_handling_seconds_count",
            method="/shuttle.v1.EventService/AppendStream",
            code="OK",
        )
        # The executor batches its events over its AppendStream call, each batch observed
        # alone: every batch carries at least one of them.
        assert 1 <= appends <= len(frames)
        assert value(events, "shuttle_events_appended_total", type="TOOL_INVOKED") == 1
        assert value(events, "shuttle_events_appended_total", type="STREAM_END") == 1
        assert value(events, "shuttle_events_appended_total", type="THREAD_MESSAGE_DELTA") >= 1
        assert value(events, "shuttle_subscriber_lag_events_count") >= 1
        assert not [k for k in events if "grpc.health" in str(k)]

        gateway = httpx.get(f"{stack.gateway}/metrics", timeout=10)
        assert gateway.status_code == 200
        assert 'shuttle_sse_connections{dialect="typed"} 0.0' in gateway.text
    finally:
        stack.stop()
        model.stop()

    lines = [
        json.loads(line) for line in (tmp_path / "logs" / "executor.log").read_text().splitlines()
    ]
    started = next(line for line in lines if line["message"] == "run started")
    assert started["workflow_id"] == workflow_id
    assert len(started["trace_id"]) == 32
    assert started["service"] == "executor"
    assert {line["workflow_id"] for line in lines if line["message"].startswith("run ")} == {
        workflow_id
    }
