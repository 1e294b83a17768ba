"""The OpenAI-compatible face when a run's answer is told again: the real executor streams
the first deltas and stalls (its model holds the stream), then the test, as the executor
that took the run over, appends STATUS_UPDATE{kind: answer_restarted}, the answer again from
index 0, and the end. A streamed completion cannot take back what it sent: it goes on past
the sent part when the new telling repeats it, and ends with an error naming the task when
it does not. A completion that is not streamed holds the final answer, once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from shuttle.envelope import ANSWER_RESTARTED
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.events.helpers import draft
from tests.support.holding_model import WAIT_SECONDS, AnswerHoldingModel
from tests.support.stack import Stack, start_stack

pytestmark = pytest.mark.integration

ANSWER = ["The first ", "owner streams ", "this answer ", "piece by piece."]
BEFORE_STALL = 3
TENANT = "default"  # every caller's tenant while auth is off


@pytest.fixture(scope="module")
def scripted_model() -> Iterator[AnswerHoldingModel]:
    server = AnswerHoldingModel(ANSWER, BEFORE_STALL)
    server.start()
    yield server
    server.release.open()
    server.stop()


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, scripted_model: AnswerHoldingModel
) -> Iterator[Stack]:
    # The planner routes on the demo model: only the executor's answer is scripted.
    demo = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": ""}
    running = start_stack(
        Path(tmp_path_factory.mktemp("answer-restart")),
        openai_base_url=scripted_model.base_url,
        process_env={"planner": demo},
    )
    yield running
    running.stop()


@pytest.fixture
def model(scripted_model: AnswerHoldingModel) -> Iterator[AnswerHoldingModel]:
    """The module's model, stalling the next answer until the test is over."""
    scripted_model.hold_again()
    yield scripted_model
    scripted_model.release.open()  # the stalled executor's appends are refused: the run ended


def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{stack.gateway}/v1", api_key="unused", max_retries=0, timeout=WAIT_SECONDS
    )


def wait_until_stalled(model: AnswerHoldingModel) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while model.holding < 1:
        assert time.monotonic() < deadline, "the answer's stream never stalled"
        time.sleep(0.01)


def take_over(stack: Stack, workflow_id: str, pieces: list[str]) -> None:
    """Append what the executor taking the run over appends: the answer told again."""
    whole = "".join(pieces)
    recovery = {"error_type": "EXECUTOR_LOST", "recovery_action": "resumed", "attempt": 1}
    drafts = [
        draft("ERROR_RECOVERY", recovery),
        draft("STATUS_UPDATE", {"kind": ANSWER_RESTARTED}),
        *[
            draft("THREAD_MESSAGE_DELTA", {"delta": piece, "index": i})
            for i, piece in enumerate(pieces)
        ],
        draft("THREAD_MESSAGE_COMPLETED", {"content": whole}),
        draft("WORKFLOW_COMPLETED", {"result": whole, "total_tokens": 20}),
    ]

    async def append() -> None:
        async with stack.channel("events") as channel:
            await events_pb2_grpc.EventServiceStub(channel).Append(
                events_pb2.AppendRequest(workflow_id=workflow_id, events=drafts),
                metadata=tenant_metadata(TENANT),
            )

    asyncio.run(append())


def content_of(chunks: list[ChatCompletionChunk]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


class Streamed:
    """A streamed chat completion, read chunk by chunk with the `openai` client."""

    def __init__(self, stack: Stack, question: str) -> None:
        stream = client(stack).chat.completions.create(
            model="shuttle-auto", messages=[{"role": "user", "content": question}], stream=True
        )
        self._received = iter(stream)
        self.chunks: list[ChatCompletionChunk] = []

    @property
    def workflow_id(self) -> str:
        return str((self.chunks[0].model_extra or {})["shuttle_workflow_id"])

    def read_first_telling(self, model: AnswerHoldingModel) -> None:
        while content_of(self.chunks) != ANSWER[:BEFORE_STALL]:
            self.chunks.append(next(self._received))
        wait_until_stalled(model)

    def read_to_end(self) -> None:
        self.chunks.extend(self._received)


def test_a_stream_goes_on_past_its_sent_part_when_the_answer_is_told_again_alike(
    stack: Stack, model: AnswerHoldingModel
) -> None:
    answer = Streamed(stack, "Tell it the same way")
    answer.read_first_telling(model)
    # The same answer, cut into other pieces: the first ends inside what was sent, the
    # ones past it stream as they come.
    again = ["The first owner ", "streams this answer ", "piece ", "by piece."]
    take_over(stack, answer.workflow_id, again)
    answer.read_to_end()

    assert content_of(answer.chunks) == [*ANSWER[:BEFORE_STALL], "piece ", "by piece."]
    finishes = [c.choices[0].finish_reason for c in answer.chunks if c.choices]
    assert [f for f in finishes if f is not None] == ["stop"]


def test_a_stream_ends_with_an_error_when_the_answer_is_told_again_otherwise(
    stack: Stack, model: AnswerHoldingModel
) -> None:
    answer = Streamed(stack, "Tell it another way")
    answer.read_first_telling(model)
    take_over(stack, answer.workflow_id, ["Another owner ", "says it otherwise."])
    with pytest.raises(openai.APIError) as failure:
        answer.read_to_end()

    # Nothing of the new telling was sent after the first: the client knows its text is not
    # the answer, and where the answer is.
    assert content_of(answer.chunks) == ANSWER[:BEFORE_STALL]
    body = failure.value.body
    assert isinstance(body, dict) and body["type"] == "answer_restarted"
    assert f"GET /api/v1/tasks/{answer.workflow_id}" in failure.value.message
    task = httpx.get(f"{stack.gateway}/api/v1/tasks/{answer.workflow_id}", timeout=30).json()
    assert task["result"] == "Another owner says it otherwise."


def test_a_completion_not_streamed_holds_the_final_answer_once(
    stack: Stack, model: AnswerHoldingModel
) -> None:
    question = "Answer me in one piece"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        reply = pool.submit(
            lambda: client(stack).chat.completions.create(
                model="shuttle-auto", messages=[{"role": "user", "content": question}]
            )
        )
        wait_until_stalled(model)
        tasks = httpx.get(f"{stack.gateway}/api/v1/tasks", timeout=30).json()["tasks"]
        workflow_id = next(t["workflow_id"] for t in tasks if t["query"] == question)
        take_over(stack, workflow_id, ["Told again, ", "whole and once."])
        completion: ChatCompletion = reply.result(timeout=WAIT_SECONDS)

    assert completion.choices[0].message.content == "Told again, whole and once."
    assert completion.choices[0].finish_reason == "stop"
