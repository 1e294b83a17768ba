"""The peer for what Shuttle's process layout costs by itself: a run's hops, and nothing else.

Three bare grpc.aio servers on Shuttle's own contracts, none of Shuttle's code in them:

- a log (`EventService.AppendStream`, `StreamBatches`): each batch gets its seqs from a
  counter and is committed to SQLite (WAL, synchronous=NORMAL, on a thread, as the events
  service commits) before its answer, then handed to the workflow's readers;
- a tool host (`ToolService.Execute`): the calculator;
- an executor (`ExecutorService.Run`): the tool loop on Shuttle's model client, every tool
  call over gRPC, the run's events (as many and as large as Shuttle's) appended over one
  AppendStream, a batch lingering as Shuttle's emitter does, and the run's log read back with
  StreamBatches and relayed one event per message.

No validation, idempotency, tenancy, leases, command watches, hooks, audit, tracing, metrics
or recovery: what Shuttle spends beyond this side is what those cost.

    .venv/bin/python -m bench.peers.hops {events,tools,executor} PORT [ARGS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from bench.peers.hops_run_log import AGENT, Appends, RunLog
from bench.peers.loops import LLM_TIMEOUT_SECONDS, TOOLS, assistant_message
from services.tools.builtins.calculator import Calculator
from shuttle.envelope import EPHEMERAL_TYPES, type_value
from shuttle.event_loop import run
from shuttle.llm.openai_model import OpenAIModel
from shuttle.v1 import (
    common_pb2,
    events_pb2,
    events_pb2_grpc,
    executor_pb2,
    executor_pb2_grpc,
    tools_pb2,
    tools_pb2_grpc,
)
from tests.support.stack import free_ports

_EPHEMERAL = {type_value(name) for name in EPHEMERAL_TYPES}
_STREAM_END = type_value("STREAM_END")


class Log:
    """Seqs from a counter, each batch committed before its answer; batches are taken one
    after another and each workflow has one reader (a run's relay), as this peer needs."""

    def __init__(self, database: Path) -> None:
        self._db = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE workflows (id TEXT PRIMARY KEY, last_seq INTEGER)")
        self._db.execute(
            "CREATE TABLE events (workflow_id TEXT, seq INTEGER, type INTEGER, agent_id TEXT,"
            " message TEXT, payload TEXT, PRIMARY KEY (workflow_id, seq))"
        )
        self._writer = ThreadPoolExecutor(1)
        self._logs: dict[str, list[common_pb2.Event]] = {}
        self._changed: dict[str, asyncio.Event] = {}

    def _commit(self, workflow_id: str, events: list[common_pb2.Event]) -> None:
        rows = [
            (workflow_id, e.seq, e.type, e.agent_id, e.message, e.payload_json)
            for e in events
            if e.type not in _EPHEMERAL
        ]
        self._db.execute("BEGIN")
        self._db.execute(
            "INSERT INTO workflows VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET last_seq = ?",
            (workflow_id, events[-1].seq, events[-1].seq),
        )
        self._db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._db.execute("COMMIT")

    async def AppendStream(
        self, calls: AsyncIterable[events_pb2.AppendCall], context: Any
    ) -> AsyncIterator[events_pb2.AppendAnswer]:
        loop = asyncio.get_running_loop()
        async for call in calls:
            workflow_id = call.request.workflow_id
            log = self._logs.setdefault(workflow_id, [])
            now = Timestamp()
            now.GetCurrentTime()
            events = [
                common_pb2.Event(
                    workflow_id=workflow_id,
                    type=draft.type,
                    agent_id=draft.agent_id,
                    message=draft.message,
                    timestamp=now,
                    seq=seq,
                    stream_id=f"{seq}-0",
                    payload_json=draft.payload_json,
                )
                for seq, draft in enumerate(call.request.events, start=len(log) + 1)
            ]
            await loop.run_in_executor(self._writer, self._commit, workflow_id, events)
            log.extend(events)
            self._changed.setdefault(workflow_id, asyncio.Event()).set()
            yield events_pb2.AppendAnswer(id=call.id, seqs=[e.seq for e in events])

    async def StreamBatches(
        self, request: events_pb2.StreamRequest, context: Any
    ) -> AsyncIterator[events_pb2.EventBatch]:
        workflow_id = request.workflow_id
        changed = self._changed.setdefault(workflow_id, asyncio.Event())
        cursor = request.from_seq - 1
        while True:
            log = self._logs.get(workflow_id, [])
            if len(log) > cursor:
                batch, cursor = log[cursor:], len(log)
                yield events_pb2.EventBatch(events=batch)
                if batch[-1].type == _STREAM_END:
                    return
                continue
            changed.clear()
            await changed.wait()


class Tools:
    """The calculator behind `ToolService.Execute`, nothing around it."""

    def __init__(self) -> None:
        self._calculator = Calculator()

    async def Execute(
        self, request: tools_pb2.ExecuteRequest, context: Any
    ) -> tools_pb2.ExecuteResponse:
        observation = await self._calculator.run(json.loads(request.arguments_json or "{}"))
        return tools_pb2.ExecuteResponse(call_id=request.call_id, observation=observation.text)


class Executor:
    """`ExecutorService.Run`: the loop, its tool calls and events, the log relayed back."""

    def __init__(self, log_target: str, tools_target: str, model_url: str) -> None:
        self._channels = [grpc.aio.insecure_channel(t) for t in (log_target, tools_target)]
        self._log = events_pb2_grpc.EventServiceStub(self._channels[0])
        self._tools = tools_pb2_grpc.ToolServiceStub(self._channels[1])
        self._appends = Appends(self._log)
        self._model = OpenAIModel(model_url, "bench", "scripted-model", LLM_TIMEOUT_SECONDS, 0)
        self._runs = itertools.count(1)

    async def Run(
        self, request: executor_pb2.StartRunRequest, context: Any
    ) -> AsyncIterator[common_pb2.Event]:
        workflow_id = f"wf-peer-{next(self._runs)}"
        running = asyncio.create_task(self._run(workflow_id, request.query))
        stream = events_pb2.StreamRequest(workflow_id=workflow_id, from_seq=1)
        async for batch in self._log.StreamBatches(stream):
            for event in batch.events:
                yield event
        await running  # a failed run's error reaches the caller

    async def _run(self, workflow_id: str, query: str) -> None:
        log = RunLog(self._appends, workflow_id)
        try:
            await self._loop(log, workflow_id, query)
        except Exception as failed:
            # The log still ends, so its reader stops and the failure is raised to the caller.
            log.emit("ERROR_OCCURRED", str(failed), {"fatal": True})
            log.emit("STREAM_END", "Stream ended", {})
            await log.close()
            raise

    async def _loop(self, log: RunLog, workflow_id: str, query: str) -> None:
        log.emit("WORKFLOW_STARTED", "Workflow started", {"query": query, "mode": "STANDARD"})
        log.emit("AGENT_STARTED", f"{AGENT} started", {"agent_id": AGENT, "role": "assistant"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": query}]
        for iteration in itertools.count(1):
            log.emit("AGENT_THINKING", "Thinking", {"status": "start", "iteration": iteration})
            started = time.perf_counter()
            result = await self._model.chat(messages, TOOLS)
            log.emit("LLM_OUTPUT", "scripted-model replied", _llm_output(result.content, started))
            action = "tool_call" if result.tool_calls else "final_answer"
            log.emit(
                "AGENT_THINKING",
                "Thought",
                {"status": "done", "iteration": iteration, "reasoning": "", "next_action": action},
            )
            if not result.tool_calls:
                break
            messages.append(assistant_message(result))
            for call in result.tool_calls:
                messages.append(
                    await self._tool_call(log, workflow_id, call.id, call.name, call.arguments)
                )
        started = time.perf_counter()
        answer: list[str] = []
        async for delta in self._model.stream_chat(messages):
            log.emit("THREAD_MESSAGE_DELTA", "", {"delta": delta, "index": len(answer)})
            answer.append(delta)
        log.emit("THREAD_MESSAGE_COMPLETED", "Answer", {"content": "".join(answer)})
        log.emit("LLM_OUTPUT", "scripted-model replied", _llm_output("".join(answer), started))
        log.emit("AGENT_COMPLETED", f"{AGENT} completed", {"agent_id": AGENT})
        log.emit("WORKFLOW_COMPLETED", "Workflow completed", {"result": "".join(answer)})
        log.emit("STREAM_END", "Stream ended", {})
        await log.close()

    async def _tool_call(
        self, log: RunLog, workflow_id: str, call_id: str, name: str, arguments: str
    ) -> dict[str, Any]:
        log.emit(
            "TOOL_INVOKED",
            f"{name}: {arguments}",
            {"tool_name": name, "call_id": call_id, "arguments": json.loads(arguments)},
        )
        started = time.perf_counter()
        request = tools_pb2.ExecuteRequest(
            workflow_id=workflow_id, call_id=call_id, tool_name=name, arguments_json=arguments
        )
        response = await self._tools.Execute(request)
        log.emit(
            "TOOL_OBSERVATION",
            f"{name}: {response.observation}",
            {
                "tool_name": name,
                "call_id": call_id,
                "result": response.observation,
                "duration_ms": int((time.perf_counter() - started) * 1000),
                "truncated": False,
            },
        )
        return {"role": "tool", "tool_call_id": call_id, "content": response.observation}


def _llm_output(output: str, started: float) -> dict[str, Any]:
    return {
        "output": output,
        "model": "scripted-model",
        "provider": "openai",
        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        "cost_usd": 0.0,
        "duration_ms": int((time.perf_counter() - started) * 1000),
    }


@dataclass(frozen=True)
class HopsPeer:
    executor: executor_pb2_grpc.ExecutorServiceAsyncStub
    pids: dict[str, int]
    """Each process by the Shuttle service it plays: events, tools, executor."""


@contextlib.asynccontextmanager
async def hops_peer(model_url: str) -> AsyncIterator[HopsPeer]:
    """The three processes and a stub of the peer's executor; stopped on exit."""
    log_port, tools_port, executor_port = free_ports(3)
    with tempfile.TemporaryDirectory() as scratch:
        started: dict[str, subprocess.Popen[str]] = {}
        try:
            for args in (
                ["events", str(log_port), str(Path(scratch) / "peer.db")],
                ["tools", str(tools_port)],
                [
                    "executor",
                    str(executor_port),
                    f"127.0.0.1:{log_port}",
                    f"127.0.0.1:{tools_port}",
                    model_url,
                ],
            ):
                started[args[0]] = _spawn(args)
            pids = {service: process.pid for service, process in started.items()}
            async with grpc.aio.insecure_channel(f"127.0.0.1:{executor_port}") as channel:
                yield HopsPeer(executor_pb2_grpc.ExecutorServiceStub(channel), pids)
        finally:
            for process in started.values():
                process.terminate()
                process.wait(timeout=30)


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.peers.hops", *args], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "serving":
        raise RuntimeError(f"the hops peer's {args[0]} process did not start")
    return process


def _handlers(args: argparse.Namespace) -> grpc.GenericRpcHandler:
    """The methods a run calls, on the service this process plays."""
    if args.service == "events":
        log = Log(Path(args.rest[0]))
        return grpc.method_handlers_generic_handler(
            "shuttle.v1.EventService",
            {
                "AppendStream": grpc.stream_stream_rpc_method_handler(
                    log.AppendStream,
                    request_deserializer=events_pb2.AppendCall.FromString,
                    response_serializer=events_pb2.AppendAnswer.SerializeToString,
                ),
                "StreamBatches": grpc.unary_stream_rpc_method_handler(
                    log.StreamBatches,
                    request_deserializer=events_pb2.StreamRequest.FromString,
                    response_serializer=events_pb2.EventBatch.SerializeToString,
                ),
            },
        )
    if args.service == "tools":
        execute = grpc.unary_unary_rpc_method_handler(
            Tools().Execute,
            request_deserializer=tools_pb2.ExecuteRequest.FromString,
            response_serializer=tools_pb2.ExecuteResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler("shuttle.v1.ToolService", {"Execute": execute})
    runs = grpc.unary_stream_rpc_method_handler(
        Executor(*args.rest).Run,
        request_deserializer=executor_pb2.StartRunRequest.FromString,
        response_serializer=common_pb2.Event.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("shuttle.v1.ExecutorService", {"Run": runs})


async def _serve(args: argparse.Namespace) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_handlers(args),))
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    print("serving", flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("service", choices=("events", "tools", "executor"))
    parser.add_argument("port", type=int)
    parser.add_argument("rest", nargs="*", help="events: DB path; executor: log, tools, model")
    run(_serve(parser.parse_args()), "auto")


if __name__ == "__main__":
    main()
