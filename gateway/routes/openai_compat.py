"""The OpenAI-compatible face: a task run as a chat completion, streamed or not.

The last user message is the task; the messages before it open a new session as its earlier
turns. `model` is `shuttle-auto` (the configured default) or a model the registry lists.
Every reply carries the workflow id in `shuttle_workflow_id` and the session in
`shuttle_session_id`, fields OpenAI clients ignore, so a caller can follow the run on the
task and session APIs too.
"""

from __future__ import annotations

import json
import math
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


def model_names(settings: Settings) -> list[str]:
    names = [AUTO_MODEL]
    if settings.model and settings.model not in names:
        names.append(settings.model)
    return names


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
    if body.model not in model_names(settings):
        raise ApiError(
            404,
            "model_not_found",
            f"model {body.model!r} does not exist; GET /v1/models lists the available ones",
        )
    last = max((i for i, m in enumerate(body.messages) if m.role == "user"), default=-1)
    query = _text(body.messages[last].content).strip() if last >= 0 else ""
    if not query:
        raise ApiError(400, "invalid_request", "messages: a non-empty user message is required")
    model = "" if body.model == AUTO_MODEL else body.model
    # The messages before the last user message become the new session's earlier turns.
    # System, developer and tool messages are not carried: the agent has its own system
    # prompt and runs its own tools.
    earlier = tuple(
        (m.role, text)
        for m in body.messages[:last]
        if m.role in ("user", "assistant") and (text := _text(m.content).strip())
    )
    return TaskSpec(query=query, model=model, earlier=earlier)


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
        "prompt_tokens": _token_count(payload.get("input_tokens")),
        "completion_tokens": _token_count(payload.get("output_tokens")),
        "total_tokens": _token_count(payload.get("total_tokens")),
    }


def _token_count(value: Any) -> int:
    """A usage figure as the OpenAI schema types it; 0 for what no producer should send
    (any producer may append events, so the payload is not trusted to be well typed)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0) if math.isfinite(value) else 0


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


class AnswerDiverged(Exception):
    """A restarted answer says something else than the part of it already streamed."""


class StreamedAnswer:
    """The answer as a stream has passed it on. Answer deltas are ephemeral: an events
    service restart, or a reader that fell behind the hot tier, loses some for good. Deltas
    are passed on until one is missing; the completed message then supplies the rest.

    A run taken over mid-answer tells it again from index 0. What was sent cannot be taken
    back, so the new telling is passed on only past what was sent, as long as it repeats
    it; one that says something else raises AnswerDiverged."""

    def __init__(self) -> None:
        self.sent = ""
        self._restarted = False
        self._told = ""
        """The current telling, as far as its deltas came in order."""
        self._deltas = 0
        self._gap = False

    def delta(self, payload: dict[str, Any]) -> str:
        """What to send of a THREAD_MESSAGE_DELTA: nothing from the first gap on."""
        index = payload.get("index")
        if isinstance(index, int) and index != self._deltas:
            self._gap = True
        if self._gap:
            return ""
        self._deltas += 1
        self._told += str(payload.get("delta", ""))
        if self.sent.startswith(self._told):
            return ""  # a new telling, still repeating what was sent
        return self._past_sent(self._told)

    def restart(self) -> None:
        """STATUS_UPDATE{kind: answer_restarted}: deltas from index 0 follow."""
        self._restarted = True
        self._told, self._deltas, self._gap = "", 0, False

    def completed(self, payload: dict[str, Any]) -> str:
        """What to send of THREAD_MESSAGE_COMPLETED: the answer past what was sent. Nothing
        if the sent text is not its start (a synthesis that failed midway is answered with
        the loop's own answer), since what was sent cannot be taken back; after a restart
        that is AnswerDiverged."""
        content = str(payload.get("content", ""))
        if not content.startswith(self.sent) and not self._restarted:
            return ""
        return self._past_sent(content)

    def _past_sent(self, text: str) -> str:
        if not text.startswith(self.sent):
            raise AnswerDiverged
        rest, self.sent = text[len(self.sent) :], text
        return rest


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
