"""The chat-completions face uses what it is given or says why not, through the official
`openai` client: system messages become the run's instructions, client tools and sampling
parameters are refused by name, and a follow-up joins its conversation's session."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.gateway.conftest import AuthStack
from tests.gateway.test_openai_compat import client_for

pytestmark = pytest.mark.integration

QUESTION = {"role": "user", "content": "What is 2*3?"}


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> Any:
    # As a client would send them: plain dicts, which the SDK's typed params describe.
    return client.chat.completions.create(
        model="shuttle-auto",
        messages=messages,  # type: ignore[arg-type]
        **extra,
    )


def spec_of(stack: AuthStack, workflow_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async with stack.stack.channel("events") as channel:
            stub = events_pb2_grpc.EventServiceStub(channel)
            record = await stub.GetWorkflow(
                events_pb2.GetWorkflowRequest(workflow_id=workflow_id, tenant_id="acme")
            )
        spec: dict[str, Any] = json.loads(record.spec_json)
        return spec

    return asyncio.run(read())


def test_system_messages_become_the_runs_instructions(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    system = {"role": "system", "content": "Answer in French."}
    developer = {"role": "developer", "content": "Be brief."}
    done = ask(client, [system, developer, QUESTION])
    workflow_id = done.model_extra["shuttle_workflow_id"]
    assert spec_of(auth_stack, workflow_id)["context"] == {
        "instructions": "Answer in French.\n\nBe brief."
    }


def test_what_shuttle_does_not_do_is_refused_by_name(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"tools": [tool]}, "tools: Shuttle runs its own tools"),
        ({"tool_choice": "required"}, "tool_choice: Shuttle runs its own tools"),
        ({"temperature": 0.2}, "temperature: sampling is set per model"),
        ({"max_tokens": 50}, "max_tokens: output caps are set per model"),
        ({"n": 2}, "n: a run gives one answer"),
        ({"response_format": {"type": "json_object"}}, "response_format:"),
    ]
    for extra, said in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(client, [QUESTION], **extra)
        assert said in str(caught.value), extra
    # Values that ask for nothing pass.
    assert ask(client, [QUESTION], n=1, tool_choice="none").choices[0].message.content


def test_a_users_follow_up_joins_the_session_its_conversation_opened(
    auth_stack: AuthStack,
) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    first = ask(client, [QUESTION], user="ada")
    session = first.model_extra["shuttle_session_id"]
    answer = {"role": "assistant", "content": first.choices[0].message.content}
    follow_up = ask(client, [QUESTION, answer, {"role": "user", "content": "And 4*5?"}], user="ada")
    assert follow_up.model_extra["shuttle_session_id"] == session
    assert follow_up.choices[0].message.content.endswith("4*5 = 20")
    with auth_stack.client(auth_stack.key_a) as api:
        turns = api.get(f"/api/v1/sessions/{session}").json()["turns"]
    assert [turn["user_message"] for turn in turns] == ["What is 2*3?", "And 4*5?"]
    # Another user, or another conversation of this one, has a session of its own.
    assert ask(client, [QUESTION], user="grace").model_extra["shuttle_session_id"] != session
    other = ask(client, [{"role": "user", "content": "What is 9*9?"}], user="ada")
    assert other.model_extra["shuttle_session_id"] != session
    # A conversation whose history differs from the session's opens one of its own too.
    edited = {"role": "assistant", "content": "something else"}
    forked = ask(client, [QUESTION, edited, {"role": "user", "content": "And 4*5?"}], user="ada")
    assert forked.model_extra["shuttle_session_id"] != session


def test_shuttle_session_id_joins_a_session_the_caller_has(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    session = ask(client, [QUESTION]).model_extra["shuttle_session_id"]
    joined = ask(
        client,
        [{"role": "user", "content": "And 4*5?"}],
        extra_body={"shuttle_session_id": session},
    )
    assert joined.model_extra["shuttle_session_id"] == session
    with pytest.raises(openai.NotFoundError, match="session"):
        ask(client, [QUESTION], extra_body={"shuttle_session_id": "sess-missing"})
    stranger = client_for(auth_stack, auth_stack.key_b)
    with pytest.raises(openai.NotFoundError):
        ask(stranger, [QUESTION], extra_body={"shuttle_session_id": session})
