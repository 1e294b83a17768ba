"""The persisting peers run the benchmarks' conversation for real: against the scripted model
over HTTP, the calculator in-process, every run saved where the peer saves it.

A run of K tool rounds is K + 1 model calls (no synthesis), K calculator results, the answer,
and the same conversation read back from the peer's database under the run's own key.
Without the `bench` extra these skip; without PostgreSQL the Postgres one skips (under CI it
fails, as the other database tests do).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from bench.peers import agents_sdk, langgraph_agent
from bench.peers.outcome import Finished, expected_history
from bench.support.model_server import k_iterations_model
from bench.support.persisting_sides import PERSISTING_SIDES, persisting_sides
from tests.support.databases import unavailable
from tests.support.scripted_openai import ScriptedOpenAI

K = 2


class Peer(Protocol):
    async def run(self, k: int) -> Finished: ...

    async def saved(self, key: str) -> list[str]: ...


@pytest.fixture
def model() -> Iterator[ScriptedOpenAI]:
    server = ScriptedOpenAI(handler=k_iterations_model).start()
    try:
        yield server
    finally:
        server.stop()


def needs(missing: str | None) -> None:
    if missing is not None:
        pytest.skip(missing)


async def needs_postgres() -> None:
    unreachable = await langgraph_agent.postgres_unreachable()
    if unreachable is not None:
        unavailable("PostgreSQL at 127.0.0.1:5432", unreachable)


def tool_contents(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def check_runs(model: ScriptedOpenAI, peer: Peer) -> None:
    """Two runs of K rounds: each asks the model K + 1 times with the calculator offered, gets
    the calculator's real results back to it, answers, and is saved on its own."""
    runs: list[Finished] = []
    for _ in range(2):
        before = len(model.requests)
        runs.append(await peer.run(K))
        requests = model.requests[before:]

        assert len(requests) == K + 1  # K tool rounds and the answer; no synthesis call
        assert not any(r.get("stream") for r in requests)
        for request in requests:
            assert [t["function"]["name"] for t in request["tools"]] == ["calculator"]
        # A fresh thread or session: the first call carries this run's question alone.
        assert [m["role"] for m in requests[0]["messages"] if m["role"] != "system"] == ["user"]
        # Each round's result went back to the model: the calculator's own answers to the
        # scripted "0+1" and "1+1".
        assert [tool_contents(r) for r in requests] == [[], ["1"], ["1", "2"]]

    for finished in runs:
        assert finished.answer == f"Done after {K} calls."
        assert finished.tool_results == K
        assert await peer.saved(finished.key) == expected_history(K)
    assert runs[0].key != runs[1].key


async def test_langgraph_with_its_sqlite_checkpointer(
    model: ScriptedOpenAI, tmp_path: Path
) -> None:
    needs(langgraph_agent.available())
    async with langgraph_agent.sqlite_agent(model.base_url, tmp_path) as peer:
        await check_runs(model, peer)
    assert (tmp_path / "langgraph.db").stat().st_size > 0


async def test_langgraph_with_its_postgres_checkpointer(model: ScriptedOpenAI) -> None:
    needs(langgraph_agent.available())
    await needs_postgres()
    schemas_before = await bench_schemas()
    async with langgraph_agent.postgres_agent(model.base_url) as peer:
        assert len(await bench_schemas()) == len(schemas_before) + 1
        await check_runs(model, peer)
    assert await bench_schemas() == schemas_before  # its schema is dropped on exit


async def test_the_agents_sdk_with_a_sqlite_session(model: ScriptedOpenAI, tmp_path: Path) -> None:
    needs(agents_sdk.available())
    async with agents_sdk.session_agent(model.base_url, tmp_path) as peer:
        await check_runs(model, peer)
    assert (tmp_path / "agents.db").stat().st_size > 0


async def test_the_suites_get_every_persisting_side_and_each_runs(model: ScriptedOpenAI) -> None:
    needs(langgraph_agent.available() or agents_sdk.available())
    await needs_postgres()
    async with persisting_sides(model.base_url) as sides:
        assert tuple(sides) == PERSISTING_SIDES
        for run in sides.values():
            before = len(model.requests)
            await run(1)
            assert len(model.requests) - before == 2


async def test_a_run_that_stops_short_is_an_error(tmp_path: Path) -> None:
    """A peer whose model answers before its K rounds would look cheap: the run fails."""
    needs(langgraph_agent.available())
    server = ScriptedOpenAI(handler=lambda body: k_iterations_model(_asking_fewer(body))).start()
    try:
        async with langgraph_agent.sqlite_agent(server.base_url, tmp_path) as peer:
            with pytest.raises(RuntimeError, match="ended after 1 of 2 tool calls"):
                await peer.run(2)
    finally:
        server.stop()


def _asking_fewer(body: dict[str, Any]) -> dict[str, Any]:
    """The request as if its question asked for one round less."""
    messages = [
        {**m, "content": "iterations=1"} if m["role"] == "user" else m for m in body["messages"]
    ]
    return {**body, "messages": messages}


async def bench_schemas() -> list[str]:
    psycopg: Any = importlib.import_module("psycopg")
    async with await psycopg.AsyncConnection.connect(langgraph_agent.POSTGRES_DSN) as connection:
        cursor = await connection.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_langgraph_%'"
        )
        return sorted(row[0] for row in await cursor.fetchall())
