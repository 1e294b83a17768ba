"""The OpenAI-compatible face: a task run as a chat completion, streamed or not.

The last user message is the task; system and developer messages become the run's
instructions (its context). The messages before the task open a new session as its earlier
turns, unless the request names a session: `shuttle_session_id` joins that one, and `user`
joins the session an earlier call of that user's conversation opened when the messages
repeat it (a follow-up). `model` is `shuttle-auto` (the configured default) or a model the
registry lists. What Shuttle does not do is refused by name: client-side tools and
functions, sampling parameters (the models file sets them), more than one choice. Every
reply carries the workflow id in `shuttle_workflow_id` and the session in
`shuttle_session_id`, fields OpenAI clients ignore, so a caller can follow the run on the
task and session APIs too.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from gateway.backends import Backends
from gateway.edge.tenancy import CallerDep
from gateway.errors import ApiError, from_grpc_status
from gateway.openai.conversation import conversation_of
from gateway.openai.counts import token_count
from gateway.openai.refusals import OWN_TOOLS, SAMPLING, refuse_unsupported
from gateway.openai.streamed_answer import AnswerDiverged, StreamedAnswer
from gateway.routes.common import Clients, Index, Sessions
from gateway.submit import TaskSpec, submit
from shuttle.envelope import ANSWER_RESTARTED, type_name
from shuttle.events_client.follow import UpstreamError
from shuttle.settings import Settings
from shuttle.utf8 import ensure_utf8, json_text

router = APIRouter(prefix="/v1", tags=["openai"])

AUTO_MODEL = "shuttle-auto"
OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "description": "invalid request, or more or longer messages than "
        "SHUTTLE_OPENAI_MAX_MESSAGES / SHUTTLE_OPENAI_MAX_MESSAGE_CHARS allow"
    },
    401: {"description": "authentication required"},
    404: {"description": "no such model"},
    413: {"description": "request body over SHUTTLE_GATEWAY_MAX_BODY_BYTES"},
    429: {"description": "rate limited (see Retry-After)"},
}


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, max_length=200)
    shuttle_session_id: str | None = Field(None, max_length=128)


REFUSED = {
    "tools": OWN_TOOLS,
    "tool_choice": OWN_TOOLS,
    "functions": OWN_TOOLS,
    "function_call": OWN_TOOLS,
    "temperature": SAMPLING,
    "top_p": SAMPLING,
    "presence_penalty": SAMPLING,
    "frequency_penalty": SAMPLING,
    "logit_bias": SAMPLING,
    "seed": SAMPLING,
    "stop": SAMPLING,
    "max_tokens": "output caps are set per model in Shuttle's models file",
    "max_completion_tokens": "output caps are set per model in Shuttle's models file",
    "logprobs": "Shuttle's answers carry no log probabilities",
    "top_logprobs": "Shuttle's answers carry no log probabilities",
    "n": "a run gives one answer; ask for n = 1",
    "response_format": "ask for the format in the message; Shuttle's agent answers in text",
}


def model_names(settings: Settings) -> list[str]:
    names = [AUTO_MODEL]
    if settings.model and settings.model not in names:
        names.append(settings.model)
    return names


def require_model(name: str, settings: Settings) -> None:
    """404 for a model neither face offers."""
    if name not in model_names(settings):
        raise ApiError(
            404,
            "model_not_found",
            f"model {name!r} does not exist; GET /v1/models lists the available ones",
        )


def _text(content: str | list[dict[str, Any]] | None) -> str:
    """A message's text; half a surrogate pair (JSON may escape one) becomes U+FFFD, which
    the task's gRPC request can carry."""
    if isinstance(content, list):
        text = "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    else:
        text = content or ""
    return ensure_utf8(text)


def _content_chars(content: str | list[dict[str, Any]] | None) -> int:
    """A message's size as the bound counts it: its text, or its parts as JSON."""
    if isinstance(content, list):
        return len(json_text(content))
    return len(content or "")


def check_bounds(body: ChatCompletionRequest, settings: Settings) -> None:
    """400 for more messages, or a longer one, than the deployment takes."""
    count, most = len(body.messages), settings.openai_max_messages
    if count > most:
        raise ApiError(
            400,
            "too_many_messages",
            f"messages holds {count} messages; at most {most} are accepted "
            f"(SHUTTLE_OPENAI_MAX_MESSAGES={most})",
        )
    longest = settings.openai_max_message_chars
    for index, message in enumerate(body.messages):
        chars = _content_chars(message.content)
        if chars > longest:
            raise ApiError(
                400,
                "message_too_long",
                f"messages[{index}].content is {chars} characters; at most {longest} are "
                f"accepted (SHUTTLE_OPENAI_MAX_MESSAGE_CHARS={longest})",
            )


def task_of(body: ChatCompletionRequest, settings: Settings) -> TaskSpec:
    check_bounds(body, settings)
    refuse_unsupported(body.model_extra or {}, REFUSED)
    require_model(body.model, settings)
    last = max((i for i, m in enumerate(body.messages) if m.role == "user"), default=-1)
    query = _text(body.messages[last].content).strip() if last >= 0 else ""
    if not query:
        raise ApiError(400, "invalid_request", "messages: a non-empty user message is required")
    model = "" if body.model == AUTO_MODEL else body.model
    # The messages before the last user message become the new session's earlier turns;
    # system and developer messages are the caller's instructions to the agent. Tool
    # messages are not carried: the agent runs its own tools.
    earlier = tuple(
        (m.role, text)
        for m in body.messages[:last]
        if m.role in ("user", "assistant") and (text := _text(m.content).strip())
    )
    instructions = "\n\n".join(
        text
        for m in body.messages
        if m.role in ("system", "developer") and (text := _text(m.content).strip())
    )
    return TaskSpec(
        query=query,
        model=model,
        earlier=earlier,
        context={"instructions": instructions} if instructions else {},
    )


@router.get("/models", responses=OPENAI_ERRORS)
async def list_models(caller: CallerDep, request: Request) -> dict[str, Any]:
    """The models a chat completion may name."""
    settings: Settings = request.app.state.settings
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "shuttle"}
            for name in model_names(settings)
        ],
    }


async def _events(
    backends: Backends, tenant: str, workflow_id: str, retry_seconds: float
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    log = backends.events.follow(workflow_id, tenant, retry_seconds=retry_seconds)
    try:
        async for events in log:
            for event in events:
                yield type_name(event.type), json.loads(event.payload_json or "{}")
    finally:
        await log.aclose()


def chat_usage(payload: dict[str, Any]) -> dict[str, int]:
    return {
        "prompt_tokens": token_count(payload.get("input_tokens")),
        "completion_tokens": token_count(payload.get("output_tokens")),
        "total_tokens": token_count(payload.get("total_tokens")),
    }


@router.post("/chat/completions", responses=OPENAI_ERRORS)
async def chat_completions(
    body: ChatCompletionRequest,
    caller: CallerDep,
    clients: Clients,
    index: Index,
    sessions: Sessions,
    request: Request,
) -> Any:
    """Run the last user message as a task and answer as a chat completion."""
    spec = task_of(body, request.app.state.settings)
    spec = await conversation_of(body, spec, caller.tenant_id, clients, sessions)
    started = await submit(clients, index, sessions, caller.tenant_id, caller.key_id, spec)
    workflow_id = started.workflow_id
    base = {
        "id": f"chatcmpl-{workflow_id}",
        "created": int(time.time()),
        "model": body.model,
        "shuttle_workflow_id": workflow_id,
        "shuttle_session_id": started.session_id,
    }
    settings: Settings = request.app.state.settings
    events = _events(clients, caller.tenant_id, workflow_id, settings.events_retry_seconds)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventSourceResponse(
            _chunks(events, base, include_usage), ping=15, headers={"Cache-Control": "no-cache"}
        )
    answer, usage, failure = "", chat_usage({}), ""
    try:
        async for kind, payload in events:
            if kind == "THREAD_MESSAGE_COMPLETED":
                answer = str(payload.get("content", ""))
            elif kind == "WORKFLOW_COMPLETED":
                answer = str(payload.get("result", answer))
                usage = chat_usage(payload)
            elif kind == "ERROR_OCCURRED" and payload.get("fatal"):
                failure = str(payload.get("error_message", "the run failed"))
            elif kind == "WORKFLOW_CANCELLED":
                failure = "the run was cancelled"
    except UpstreamError as exc:
        raise from_grpc_status(exc.status, f"events service: {exc.message}") from exc
    if failure:
        raise ApiError(502, "run_failed", f"workflow {workflow_id}: {failure}")
    return JSONResponse(
        {
            **base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
    )


LogEvents = AsyncGenerator[tuple[str, dict[str, Any]], None]
"""A followed log's events: (type name, payload)."""


async def _chunks(
    events: LogEvents, base: dict[str, Any], include_usage: bool
) -> AsyncIterator[ServerSentEvent]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ServerSentEvent:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {**base, "object": "chat.completion.chunk", "choices": [choice], **extra}
        return ServerSentEvent(data=json_text(body))

    yield chunk({"role": "assistant", "content": ""})
    answer = StreamedAnswer()
    try:
        async for kind, payload in events:
            if kind == "THREAD_MESSAGE_DELTA":
                if piece := answer.delta(payload):
                    yield chunk({"content": piece})
            elif kind == "THREAD_MESSAGE_COMPLETED":
                if rest := answer.completed(payload):
                    yield chunk({"content": rest})
            elif kind == "STATUS_UPDATE" and payload.get("kind") == ANSWER_RESTARTED:
                answer.restart()
            elif kind == "WORKFLOW_COMPLETED":
                yield chunk({}, "stop")
                if include_usage:
                    usage_chunk = {**base, "object": "chat.completion.chunk", "choices": []}
                    usage_chunk["usage"] = chat_usage(payload)
                    yield ServerSentEvent(data=json.dumps(usage_chunk))
            elif (kind == "ERROR_OCCURRED" and payload.get("fatal")) or (
                kind == "WORKFLOW_CANCELLED"
            ):
                message = str(payload.get("error_message", "the run was cancelled"))
                error = {"error": {"message": message, "type": "run_failed", "code": None}}
                yield ServerSentEvent(data=json.dumps(error))
    except AnswerDiverged:
        workflow_id = base["shuttle_workflow_id"]
        message = (
            f"workflow {workflow_id} moved to another executor in the middle of its answer, "
            "which told the answer again differently from the part already streamed; the "
            f"whole answer is the task's result (GET /api/v1/tasks/{workflow_id})"
        )
        error = {"error": {"message": message, "type": "answer_restarted", "code": None}}
        yield ServerSentEvent(data=json.dumps(error))
    except UpstreamError as exc:
        error = {"error": {"message": exc.message, "type": "upstream_error", "code": exc.code}}
        yield ServerSentEvent(data=json.dumps(error))
    finally:
        await events.aclose()  # the log is left unread after an AnswerDiverged
    yield ServerSentEvent(data="[DONE]")
