"""The Responses API subset, through the official `openai` client against a running stack
with authentication: waiting, background and streamed responses, a stream rejoined after
any event, cancel, sessions continued, and refusals by name."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import AuthStack
from tests.support.stack import Stack

pytestmark = pytest.mark.integration

ANSWER = "[demo model] 12*7 = 84"


def client_for(gateway: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0)


@pytest.fixture
def client(auth_stack: AuthStack) -> Iterator[openai.OpenAI]:
    with client_for(auth_stack.url, auth_stack.key_a) as made:
        yield made


def workflow_session(stack: AuthStack, workflow_id: str) -> str:
    with stack.client(stack.key_a) as http:
        return str(http.get(f"/api/v1/tasks/{workflow_id}").json()["session_id"])


def test_a_response_waits_for_its_run(client: openai.OpenAI) -> None:
    response = client.responses.create(model="shuttle-auto", input="What is 12*7?")
    assert response.status == "completed" and response.output_text == ANSWER
    assert response.id.startswith("resp_wf-")
    assert response.usage is not None and response.usage.total_tokens > 0
    assert client.responses.retrieve(response.id).output_text == ANSWER


def test_a_background_response_is_retrieved_once_done(client: openai.OpenAI) -> None:
    response = client.responses.create(model="shuttle-auto", input="What is 12*7?", background=True)
    assert response.status in ("queued", "in_progress", "completed") and response.background
    deadline = time.monotonic() + 30
    while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.05)
        response = client.responses.retrieve(response.id)
    assert response.status == "completed" and response.output_text == ANSWER


def streamed(client: openai.OpenAI) -> list[Any]:
    with client.responses.create(
        model="shuttle-auto", input="What is 12*7?", stream=True, background=True
    ) as stream:
        return list(stream)


def test_a_stream_numbers_every_event_and_ends_completed(client: openai.OpenAI) -> None:
    events = streamed(client)
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == ANSWER == events[-1].response.output_text


def test_a_stream_rejoined_after_any_event_goes_on_from_there(client: openai.OpenAI) -> None:
    events = streamed(client)
    response_id = events[0].response.id
    for cut in range(-1, len(events) - 1):
        with client.responses.retrieve(response_id, stream=True, starting_after=cut) as rejoined:
            after = [event.model_dump() for event in rejoined]
        assert after == [event.model_dump() for event in events[cut + 1 :]], cut


def test_previous_response_id_continues_its_session(
    auth_stack: AuthStack, client: openai.OpenAI
) -> None:
    first = client.responses.create(model="shuttle-auto", input="What is 2*3?")
    second = client.responses.create(
        model="shuttle-auto", input="And 4*5?", previous_response_id=first.id
    )
    assert second.output_text.endswith("4*5 = 20")
    sessions = {workflow_session(auth_stack, r.id.removeprefix("resp_")) for r in (first, second)}
    assert len(sessions) == 1


def test_what_shuttle_does_not_do_is_refused_by_name(
    auth_stack: AuthStack, client: openai.OpenAI
) -> None:
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    cases: list[tuple[dict[str, Any], type[openai.APIStatusError], str]] = [
        ({"tools": [tool]}, openai.BadRequestError, "tools: Shuttle runs its own tools"),
        ({"temperature": 0.2}, openai.BadRequestError, "temperature: sampling is set"),
        ({"metadata": {"a": "b"}}, openai.BadRequestError, "metadata: Shuttle does not keep"),
        ({"model": "gpt-9"}, openai.NotFoundError, "model 'gpt-9' does not exist"),
    ]
    for extra, refusal, said in cases:
        arguments: dict[str, Any] = {"model": "shuttle-auto", "input": "What is 1+1?", **extra}
        with pytest.raises(refusal) as caught:
            client.responses.create(**arguments)
        assert said in str(caught.value), extra
    with pytest.raises(openai.BadRequestError, match="last message must be a user"):
        client.responses.create(
            model="shuttle-auto", input=[{"role": "assistant", "content": "hi"}]
        )
    mine = client.responses.create(model="shuttle-auto", input="What is 1+1?")
    with client_for(auth_stack.url, auth_stack.key_b) as other:
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.create(
                model="shuttle-auto", input="Go on", previous_response_id=mine.id
            )
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_")
    anonymous = httpx.post(
        f"{auth_stack.url}/v1/responses", json={"model": "shuttle-auto", "input": "hi"}
    )
    assert anonymous.status_code == 401


def test_a_background_response_waiting_on_a_human_is_cancelled(
    gated: tuple[Stack, str, str],
) -> None:
    stack, key_a, _ = gated
    with client_for(stack.gateway, key_a) as client:
        response = client.responses.create(
            model="shuttle-auto", input="What is 5*5?", background=True
        )
        assert response.status in ("queued", "in_progress")
        cancelled = client.responses.cancel(response.id)
        again = client.responses.retrieve(response.id)
        with client.responses.retrieve(response.id, stream=True) as stream:
            last = list(stream)[-1]
    assert cancelled.status == again.status == "cancelled"
    assert last.type == "response.incomplete" and last.response.status == "cancelled"
