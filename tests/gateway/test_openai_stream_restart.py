"""A streamed chat completion across an events service restart: the real gateway (uvicorn,
in this process) follows the run's log while the events service (its own process) is killed
and started again mid-answer, and the `openai` client's stream goes on to its end with the
whole answer, once; answer deltas the dead service took with it included."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from shuttle.envelope import type_name
from shuttle.grpc_client import tenant_metadata
from shuttle.settings import Settings
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.support.events_process import EventsProcess
from tests.support.gateway_server import GatewayServer
from tests.support.holding_model import WAIT_SECONDS, AnswerHoldingModel
from tests.support.holding_relay import HoldingRelay
from tests.support.processes import start_service_process, stop_process
from tests.support.sse import Frame, parse_frames

pytestmark = pytest.mark.integration

ANSWER = ["Streams ", "carry ", "the ", "answer ", "piece ", "by ", "piece, ", "in order."]
BEFORE_RESTART = 3
TENANT = "default"  # every caller's tenant while auth is off


class RecordingTransport(httpx2.BaseTransport):
    """The default transport of the HTTP library the `openai` client is built on, keeping a
    copy of each response body as the client reads it: the wire as the SDK saw it."""

    def __init__(self) -> None:
        self._inner = httpx2.HTTPTransport()
        self.body = bytearray()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        assert isinstance(response.stream, httpx2.SyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, self.body),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()

    def frames(self) -> list[Frame]:
        text = self.body.decode().replace("\r\n", "\n")
        frames, _ = parse_frames(text.split("\n"))
        return frames


class _Tee(httpx2.SyncByteStream):
    def __init__(self, stream: httpx2.SyncByteStream, sink: bytearray) -> None:
        self._stream, self._sink = stream, sink

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self._sink.extend(chunk)
            yield chunk

    def close(self) -> None:
        self._stream.close()


@dataclass
class Backends:
    events: EventsProcess
    model: AnswerHoldingModel
    settings: Settings
    """The gateway's settings."""

    def gateway(self, **overrides: object) -> GatewayServer:
        return GatewayServer(self.settings.model_copy(update=overrides)).start()


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[AnswerHoldingModel]:
    server = AnswerHoldingModel(ANSWER, BEFORE_RESTART)
    server.start()
    yield server
    server.release.open()
    server.stop()


@pytest.fixture
def model(scripted_model: AnswerHoldingModel) -> Iterator[AnswerHoldingModel]:
    """The module's model, holding the next answer."""
    scripted_model.hold_again()
    yield scripted_model
    scripted_model.release.open()


@pytest.fixture(scope="module")
def services(
    events_process: EventsProcess,
    scripted_model: AnswerHoldingModel,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Backends]:
    """Tools, planner (demo model) and executor (the scripted model) as processes of their
    own, in front of the restartable events service."""
    tmp_path = tmp_path_factory.mktemp("backends")
    common = {
        "SHUTTLE_EVENTS_ADDR": events_process.target,
        "SHUTTLE_DATA_DIR": str(tmp_path),
        "SHUTTLE_DATABASE_URL": "",
        "SHUTTLE_REDIS_URL": "",
        "OPENAI_BASE_URL": "",
        "OPENAI_API_KEY": "",
        "SHUTTLE_MODEL": "",
    }
    processes = []
    try:
        tools, tools_port = start_service_process("tools", common, tmp_path / "tools.log")
        processes.append(tools)
        planner, planner_port = start_service_process("planner", common, tmp_path / "planner.log")
        processes.append(planner)
        executor_env = {
            **common,
            "SHUTTLE_TOOLS_ADDR": f"127.0.0.1:{tools_port}",
            "SHUTTLE_PLANNER_ADDR": f"127.0.0.1:{planner_port}",
            "OPENAI_BASE_URL": scripted_model.base_url,
            "OPENAI_API_KEY": "test-key",
            "SHUTTLE_MODEL": scripted_model.model,
        }
        executor, executor_port = start_service_process(
            "executor", executor_env, tmp_path / "executor.log"
        )
        processes.append(executor)
        settings = Settings(
            events_port=events_process.port,
            tools_port=tools_port,
            planner_port=planner_port,
            executor_port=executor_port,
            data_dir=tmp_path,
            database_url="",
            auth="off",
            rate_limit="100000/minute",
        )
        yield Backends(events_process, scripted_model, settings)
    finally:
        for process in reversed(processes):
            stop_process(process)


@pytest.fixture
def backends(services: Backends, model: AnswerHoldingModel) -> Backends:
    return services


@pytest.fixture
def gateway(backends: Backends) -> Iterator[GatewayServer]:
    server = backends.gateway()
    yield server
    server.stop()


@pytest.fixture
def relayed_gateway(backends: Backends) -> Iterator[tuple[GatewayServer, HoldingRelay]]:
    """A gateway that reaches the events service through a relay the test can hold."""
    relay = HoldingRelay(backends.events.port).start()
    server = backends.gateway(events_addr=relay.target)
    yield server, relay
    server.stop()
    relay.stop()


class Answer:
    """A streamed chat completion read with the `openai` client, chunk by chunk."""

    def __init__(self, gateway: GatewayServer) -> None:
        self.recorder = RecordingTransport()
        self._client = openai.OpenAI(
            base_url=f"{gateway.url}/v1",
            api_key="unused",
            max_retries=0,
            timeout=WAIT_SECONDS,
            http_client=httpx2.Client(transport=self.recorder),
        )
        stream = self._client.chat.completions.create(
            model="shuttle-auto",
            messages=[{"role": "user", "content": "How does an answer reach me?"}],
            stream=True,
        )
        self._received = iter(stream)
        self.chunks: list[ChatCompletionChunk] = []

    @property
    def workflow_id(self) -> str:
        return str((self.chunks[0].model_extra or {})["shuttle_workflow_id"])

    def read_until_content(self, expected: list[str]) -> None:
        while content_of(self.chunks) != expected:
            chunk = next(self._received, None)
            assert chunk is not None, f"the stream ended early: {self.recorder.frames()}"
            self.chunks.append(chunk)

    def read_to_end(self) -> None:
        self.chunks.extend(self._received)  # raises on an error frame from the gateway
        self._client.close()

    def assert_ended_normally(self) -> None:
        finishes = [c.choices[0].finish_reason for c in self.chunks if c.choices]
        assert [f for f in finishes if f is not None] == ["stop"]
        assert finishes[-1] == "stop"
        frames = self.recorder.frames()
        assert frames[-1].data == "[DONE]"
        assert not [f.data for f in frames if '"error"' in f.data]


def wait_until_holding(model: AnswerHoldingModel) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while model.holding < 1:
        assert time.monotonic() < deadline, "the answer's stream never reached its hold"
        time.sleep(0.01)


def content_of(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


def read_log(target: str, workflow_id: str) -> list[str]:
    """The types on the workflow's log, read to its STREAM_END straight from the service."""
    with grpc.insecure_channel(target) as channel:
        stream = events_pb2_grpc.EventServiceStub(channel).Stream(
            events_pb2.StreamRequest(workflow_id=workflow_id, tenant_id=TENANT, from_seq=1),
            metadata=tenant_metadata(TENANT),
            timeout=WAIT_SECONDS,
        )
        return [type_name(event.type) for event in stream]


def test_a_streamed_chat_completion_survives_an_events_service_restart(
    backends: Backends, gateway: GatewayServer
) -> None:
    answer = Answer(gateway)
    # The model holds the answer after its first deltas: once the client has them all,
    # nothing the log holds is still on its way to the gateway.
    answer.read_until_content(ANSWER[:BEFORE_RESTART])
    wait_until_holding(backends.model)

    backends.events.kill()
    backends.events.start()
    backends.model.release.open()
    answer.read_to_end()

    assert content_of(answer.chunks) == ANSWER, "every delta once, in order"
    assert "".join(content_of(answer.chunks)) == "".join(ANSWER)
    answer.assert_ended_normally()


def test_deltas_lost_with_the_events_service_come_with_the_completed_answer(
    backends: Backends, relayed_gateway: tuple[GatewayServer, HoldingRelay]
) -> None:
    gateway, relay = relayed_gateway
    answer = Answer(gateway)
    answer.read_until_content(ANSWER[:BEFORE_RESTART])
    wait_until_holding(backends.model)
    # The rest of the run reaches the log but not the gateway; then the service dies and
    # its hot tier, the only place answer deltas are kept, with it.
    relay.hold()
    backends.model.release.open()
    log = read_log(backends.events.target, answer.workflow_id)
    assert log.count("THREAD_MESSAGE_DELTA") == len(ANSWER)
    backends.events.kill()
    relay.drop()
    backends.events.start()
    answer.read_to_end()

    rest = "".join(ANSWER[BEFORE_RESTART:])
    assert content_of(answer.chunks) == [*ANSWER[:BEFORE_RESTART], rest]
    answer.assert_ended_normally()
