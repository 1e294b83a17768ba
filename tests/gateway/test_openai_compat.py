"""The OpenAI-compatible face, driven by the official `openai` client."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from gateway.openai.streamed_answer import AnswerDiverged, StreamedAnswer
from gateway.routes.openai_compat import chat_usage
from tests.gateway.conftest import AuthStack

pytestmark = pytest.mark.integration


def client_for(stack: AuthStack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)


def test_models_list_names_the_auto_model(auth_stack: AuthStack) -> None:
    models = client_for(auth_stack, auth_stack.key_a).models.list()
    assert "shuttle-auto" in [m.id for m in models.data]


def test_a_chat_completion_runs_the_last_user_message(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    reply = client.chat.completions.create(
        model="shuttle-auto",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 1+1?"},
            {"role": "assistant", "content": "2"},
            {"role": "user", "content": "What is 12*7?"},
        ],
    )
    assert reply.choices[0].message.content == "[demo model] 12*7 = 84"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.total_tokens > 0
    workflow_id = (reply.model_extra or {})["shuttle_workflow_id"]
    with auth_stack.client(auth_stack.key_a) as api:
        assert api.get(f"/api/v1/tasks/{workflow_id}").json()["query"] == "What is 12*7?"


def test_half_a_surrogate_pair_in_a_message_becomes_a_replacement_character(
    auth_stack: AuthStack,
) -> None:
    # Escaped in JSON, as a client holding UTF-16 strings may send it; parsed, it is a str
    # that UTF-8 (and so the task's gRPC request) cannot encode.
    body = (
        b'{"model": "shuttle-auto", "messages": [{"role": "user", "content": "hi \\ud83d"}, '
        b'{"role": "assistant", "content": "hello"}, '
        b'{"role": "user", "content": [{"type": "text", "text": "What is 2*3? \\udce9"}]}]}'
    )
    with auth_stack.client(auth_stack.key_a) as api:
        reply = api.post(
            "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "[demo model] 2*3 = 6"
        task = api.get(f"/api/v1/tasks/{reply.json()['shuttle_workflow_id']}").json()
    assert task["query"] == "What is 2*3? \ufffd"


def test_a_streamed_chat_completion_carries_the_answer_in_chunks(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    stream = client.chat.completions.create(
        model="shuttle-auto",
        messages=[{"role": "user", "content": "What is 9*9?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "[demo model] 9*9 = 81"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert {(c.model_extra or {})["shuttle_workflow_id"] for c in chunks} != {None}


def test_errors_come_back_as_openai_errors(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    with pytest.raises(openai.NotFoundError, match="gpt-nope"):
        client.chat.completions.create(
            model="gpt-nope", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError, match="user message"):
        client.chat.completions.create(
            model="shuttle-auto", messages=[{"role": "system", "content": "hi"}]
        )
    with pytest.raises(openai.AuthenticationError):
        client_for(auth_stack, "sk-shuttle-wrong").models.list()


def test_a_hundred_thousand_messages_are_refused_naming_the_bound(auth_stack: AuthStack) -> None:
    messages = [{"role": "user", "content": "x"} for _ in range(100_000)]
    with auth_stack.client(auth_stack.key_a) as api:
        before = len(api.get("/api/v1/tasks?limit=100").json()["tasks"])
        reply = api.post(
            "/v1/chat/completions", json={"model": "shuttle-auto", "messages": messages}
        )
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["code"] == "too_many_messages"
        assert "100000 messages" in error["message"]
        assert "SHUTTLE_OPENAI_MAX_MESSAGES=1000" in error["message"]
        # Nothing was started, and the gateway goes on serving.
        assert len(api.get("/api/v1/tasks?limit=100").json()["tasks"]) == before
        assert api.get("/v1/models").status_code == 200


def test_a_message_over_the_size_bound_is_refused_naming_it(auth_stack: AuthStack) -> None:
    client = client_for(auth_stack, auth_stack.key_a)
    long_text = "y" * 100_001
    for content in (long_text, [{"type": "text", "text": long_text}]):
        messages: list[Any] = [
            {"role": "user", "content": "What is 1+1?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "What is 2+2?"},
        ]
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="shuttle-auto", messages=messages)
        body = refused.value.body
        assert isinstance(body, dict) and body["code"] == "message_too_long"
        assert "messages[1].content is 100" in body["message"]
        assert "SHUTTLE_OPENAI_MAX_MESSAGE_CHARS=100000" in body["message"]
    at_the_bound = client.chat.completions.create(
        model="shuttle-auto",
        messages=[
            {"role": "assistant", "content": "z" * 100_000},
            {"role": "user", "content": "What is 2+2?"},
        ],
    )
    assert at_the_bound.choices[0].message.content == "[demo model] 2+2 = 4"


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}, (12, 3, 15)),
        ({"input_tokens": 12.0, "output_tokens": -4, "total_tokens": float("nan")}, (12, 0, 0)),
        ({"input_tokens": "12", "output_tokens": None, "total_tokens": True}, (0, 0, 0)),
        ({"input_tokens": "many", "output_tokens": [1], "total_tokens": {"n": 1}}, (0, 0, 0)),
        ({}, (0, 0, 0)),
    ],
)
def test_usage_reads_only_well_typed_counts(
    payload: dict[str, Any], expected: tuple[int, ...]
) -> None:
    """Any producer may append WORKFLOW_COMPLETED: a malformed usage must not break the reply."""
    usage = chat_usage(payload)
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == expected


def deltas(*pieces: tuple[int, str]) -> list[dict[str, Any]]:
    return [{"delta": text, "index": index} for index, text in pieces]


@pytest.mark.parametrize(
    ("received", "content", "expected"),
    [
        # Every delta: the completed message adds nothing.
        (deltas((0, "a "), (1, "b "), (2, "c")), "a b c", ["a ", "b ", "c"]),
        # None (replayed from SQL, where deltas are not kept): the whole answer at the end.
        ([], "a b c", ["a b c"]),
        # The last ones lost: the rest at the end.
        (deltas((0, "a ")), "a b c", ["a ", "b c"]),
        # One lost in the middle: nothing past the gap until the end brings the rest.
        (deltas((0, "a "), (2, "c ")), "a b c d", ["a ", "b c d"]),
        # The first lost.
        (deltas((1, "b "), (2, "c")), "a b c", ["a b c"]),
        # A synthesis that failed midway, answered with the loop's answer: what was sent stays.
        (deltas((0, "Par"), (1, "tial")), "Fallback", ["Par", "tial"]),
    ],
)
def test_a_streamed_answer_is_whole_however_many_deltas_were_lost(
    received: list[dict[str, Any]], content: str, expected: list[str]
) -> None:
    answer = StreamedAnswer()
    sent = [answer.delta(payload) for payload in received]
    sent.append(answer.completed({"content": content}))
    assert [piece for piece in sent if piece] == expected


RESTART: dict[str, Any] = {"restart": True}


@pytest.mark.parametrize(
    ("received", "content", "expected"),
    [
        # Told again the same way (split elsewhere): only what goes past the sent part.
        (
            [
                *deltas((0, "The an"), (1, "swer is")),
                RESTART,
                *deltas((0, "The answer "), (1, "is 42.")),
            ],
            "The answer is 42.",
            ["The an", "swer is", " 42."],
        ),
        # Told again with its deltas lost: the completed message brings the rest.
        ([*deltas((0, "The an")), RESTART, *deltas((3, "42."))], "The answer is 42.", None),
        # Cut off before any delta went out: the new telling streams as any answer does.
        ([RESTART, *deltas((0, "Hi "), (1, "there."))], "Hi there.", ["Hi ", "there."]),
    ],
)
def test_a_restarted_answer_passes_on_only_what_goes_past_the_sent_part(
    received: list[dict[str, Any]], content: str, expected: list[str] | None
) -> None:
    answer = StreamedAnswer()
    sent: list[str] = []
    for payload in received:
        if payload is RESTART:
            answer.restart()
        else:
            sent.append(answer.delta(payload))
    sent.append(answer.completed({"content": content}))
    assert "".join(piece for piece in sent if piece) == content
    if expected is not None:
        assert [piece for piece in sent if piece] == expected


def test_a_restarted_answer_that_differs_from_the_sent_part_cannot_be_streamed() -> None:
    answer = StreamedAnswer()
    answer.delta({"delta": "The answer is 41", "index": 0})
    answer.restart()
    assert answer.delta({"delta": "The answer", "index": 0}) == ""
    with pytest.raises(AnswerDiverged):
        answer.delta({"delta": " was 42.", "index": 1})
    # Found at the end when the new telling's deltas were lost.
    lost = StreamedAnswer()
    lost.delta({"delta": "The answer is 41", "index": 0})
    lost.restart()
    with pytest.raises(AnswerDiverged):
        lost.completed({"content": "It is 42."})
