"""Shared pieces of the fault tests: the scale (read once from CHAOS_SCALE), the scripted
model, and two stacks — the embedded default (SQLite, in-process hot tier) and the scale-out
one (a private PostgreSQL cluster and a private Redis, both of which the tests restart)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from pydantic_settings import BaseSettings, SettingsConfigDict

from tests.chaos.effect_provider import EffectProvider
from tests.chaos.model import ChaosModel
from tests.chaos.private_postgres import PrivatePostgres
from tests.chaos.takeover import Kit
from tests.chaos.takeover_model import TakeoverModel
from tests.chaos.takeover_stacks import ReplicatedTarget
from tests.support.databases import PrivateRedis, free_port
from tests.support.replicated_stack import replicated_stack
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.stack import Stack, start_stack

# Each model call waits this long, like a real model, so a fault lands while runs are busy.
MODEL_LATENCY_SECONDS = 0.2
TAKEOVER_COUNTS = {"events": 1, "tools": 1, "planner": 1, "executor": 3, "gateway": 2}


class ChaosSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHAOS_")

    scale: Literal["ci", "full"] = "ci"
    """`ci`: the reduced set inside `make test`; `full`: `make chaos`."""


@dataclass(frozen=True)
class Scale:
    name: str
    runs: int
    """Concurrent runs per fault."""
    subscribers_per_run: int
    reconnecting_clients: int
    cuts_per_client: int
    test_timeout_seconds: int
    takeover_runs: int
    """Runs held at each kill point of the takeover matrix (the first one's owner dies)."""
    embedded_points: tuple[str, ...]
    """Kill points also tried on the embedded stack under `shuttle up` (all: on replicas)."""
    rolling_runs: int
    """Runs in flight through a rolling restart of the executors."""


SCALES = {
    "ci": Scale(
        "ci",
        runs=3,
        subscribers_per_run=2,
        reconnecting_clients=10,
        cuts_per_client=2,
        test_timeout_seconds=240,
        takeover_runs=1,
        embedded_points=("model-call", "synthesis"),
        rolling_runs=6,
    ),
    "full": Scale(
        "full",
        runs=10,
        subscribers_per_run=3,
        reconnecting_clients=100,
        cuts_per_client=3,
        test_timeout_seconds=900,
        takeover_runs=3,
        embedded_points=(
            "model-call",
            "tool-in-flight",
            "tool-ran",
            "synthesis",
            "paused",
            "approval",
            "dag-step",
        ),
        rolling_runs=20,
    ),
}

SCALE = SCALES[ChaosSettings().scale]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("chaos") is not None:
            item.add_marker(pytest.mark.timeout(SCALE.test_timeout_seconds))


@pytest.fixture(scope="session")
def scale() -> Scale:
    return SCALE


@pytest.fixture(scope="session")
def chaos_model() -> Iterator[ChaosModel]:
    yield ChaosModel()


@pytest.fixture(scope="session")
def model_server(chaos_model: ChaosModel) -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI(handler=chaos_model).start()
    server.latency_seconds = MODEL_LATENCY_SECONDS
    yield server
    server.stop()


@pytest.fixture(scope="session")
def embedded_stack(
    model_server: ScriptedOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The `make run` configuration: SQLite under the data dir, in-process hot tier."""
    stack = start_stack(tmp_path_factory.mktemp("chaos-embedded"), model_server.base_url)
    yield stack
    stack.stop()


@dataclass
class ScaledStack:
    stack: Stack
    postgres: PrivatePostgres
    redis: PrivateRedis


@pytest.fixture(scope="session")
def scaled_stack(
    model_server: ScriptedOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ScaledStack]:
    """PostgreSQL and Redis of the tests' own, so restarting them touches nothing shared."""
    postgres = PrivatePostgres().create()
    redis = PrivateRedis(free_port())
    try:
        redis.start()
        env = {"SHUTTLE_DATABASE_URL": postgres.url, "SHUTTLE_REDIS_URL": redis.url}
        data_dir: Path = tmp_path_factory.mktemp("chaos-scaled")
        stack = start_stack(data_dir, model_server.base_url, extra_env=env)
        try:
            yield ScaledStack(stack, postgres, redis)
        finally:
            stack.stop()
    finally:
        redis.stop()
        postgres.destroy()


@pytest.fixture(scope="session")
def takeover_kit() -> Iterator[Kit]:
    """The takeover tests' model and tool provider, shared by both of their stacks."""
    model = TakeoverModel()
    model.start()
    provider = EffectProvider().start()
    kit = Kit(model, provider)
    try:
        yield kit
    finally:
        kit.release_all()
        provider.stop()
        model.stop()


@pytest.fixture(scope="session")
def takeover_replicas(
    takeover_kit: Kit, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicatedTarget]:
    """Three executors and two gateways on PostgreSQL and Redis, with short run leases."""
    data_dir = Path(tmp_path_factory.mktemp("chaos-takeover"))
    workspaces = data_dir / "workspaces"
    env = takeover_kit.environment(workspaces)
    with replicated_stack(data_dir, TAKEOVER_COUNTS, takeover_kit.model.base_url, env) as stack:
        yield ReplicatedTarget(stack, workspaces)
