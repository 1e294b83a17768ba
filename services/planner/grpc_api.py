"""PlannerService over gRPC: protobuf in, domain calls, protobuf out; errors as statuses."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NoReturn

import grpc
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from services.planner.analysis import analyze_plan
from services.planner.planning import make_plan
from services.planner.retry_log import retry_reporter
from services.planner.routing import Mode, route
from services.planner.selection import ToolInfo, select_tools
from services.planner.structured import (
    NO_DEFAULT,
    StructuredOutputError,
    structured_llm_call,
)
from shuttle.events_client import EventsClient
from shuttle.grpc_auth import EXECUTOR, method_roles
from shuttle.grpc_client import TENANT_METADATA_KEY
from shuttle.grpc_server import Context
from shuttle.llm.factory import ModelRegistry
from shuttle.llm.protocol import LLM, ContextOverflowError, Message
from shuttle.plans import StepResult
from shuttle.usage import usage_to_proto
from shuttle.utf8 import json_text
from shuttle.v1 import common_pb2, planner_pb2, planner_pb2_grpc

_ROLES = {"system", "user", "assistant", "tool"}
# Who may call each method: the planner works for the executor's runs alone.
CALLER_ROLES = method_roles(
    planner_pb2.DESCRIPTOR.services_by_name["PlannerService"],
    {
        name: {EXECUTOR}
        for name in ("StructuredCall", "SelectTools", "Plan", "AnalyzePlan", "Route")
    },
)
_MODES = {
    Mode.SIMPLE: common_pb2.MODE_SIMPLE,
    Mode.STANDARD: common_pb2.MODE_STANDARD,
    Mode.COMPLEX: common_pb2.MODE_COMPLEX,
}


async def _abort(context: Context, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("unreachable")


def messages_from_pb(messages: Sequence[common_pb2.ChatMessage]) -> list[Message]:
    """OpenAI-format dicts; raises ValueError naming the bad message."""
    out: list[Message] = []
    for index, m in enumerate(messages):
        if m.role not in _ROLES:
            raise ValueError(
                f"messages[{index}].role must be one of {', '.join(sorted(_ROLES))}, got {m.role!r}"
            )
        message: Message = {"role": m.role, "content": m.content}
        if m.name:
            message["name"] = m.name
        if m.tool_call_id:
            message["tool_call_id"] = m.tool_call_id
        if m.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json},
                }
                for c in m.tool_calls
            ]
        out.append(message)
    return out


def parse_schema(text: str) -> dict[str, Any]:
    """The request's JSON schema; raises ValueError saying what is wrong with it."""
    if not text.strip():
        raise ValueError("json_schema is required")
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"json_schema is not valid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ValueError("json_schema must be a JSON object")
    if schema.get("type", "object") != "object":
        raise ValueError('json_schema must describe an object ("type": "object")')
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"json_schema is not a valid JSON Schema: {exc.message}") from None
    return schema


def _tools(summaries: Sequence[planner_pb2.ToolSummary]) -> list[ToolInfo]:
    return [ToolInfo(t.name, t.description) for t in summaries if t.name]


class PlannerServicer(planner_pb2_grpc.PlannerServiceServicer):
    def __init__(self, models: ModelRegistry, events: EventsClient | None = None) -> None:
        self._models = models
        self._events = events

    async def _model(self, context: Context, role: str, workflow_id: str) -> LLM:
        """The role's model; its retries go on the workflow's log when the caller named the
        workflow and its tenant (gRPC metadata)."""
        try:
            model = self._models.for_role(role)
        except ValueError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"model_role: {exc}")
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        tenant = str(metadata.get(TENANT_METADATA_KEY, ""))
        if self._events is None or not workflow_id or not tenant:
            return model
        return model.with_observer(retry_reporter(self._events, workflow_id, tenant))

    async def StructuredCall(
        self, request: planner_pb2.StructuredCallRequest, context: Context
    ) -> planner_pb2.StructuredCallResponse:
        try:
            schema = parse_schema(request.json_schema)
            if not request.messages:
                raise ValueError("messages must not be empty")
            messages = messages_from_pb(request.messages)
            default: Any = NO_DEFAULT
            if request.default_value_json:
                try:
                    default = json.loads(request.default_value_json)
                except ValueError as exc:
                    raise ValueError(f"default_value_json is not valid JSON: {exc}") from None
        except ValueError as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        llm = await self._model(context, request.model_role, request.workflow_id)
        try:
            result = await structured_llm_call(
                llm,
                messages,
                schema,
                schema_name=request.schema_name or "respond",
                default=default,
            )
        except ContextOverflowError as exc:
            await _abort(context, grpc.StatusCode.OUT_OF_RANGE, str(exc))
        except StructuredOutputError as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
        return planner_pb2.StructuredCallResponse(
            value_json=json_text(result.value),
            level=int(result.level),  # type: ignore[arg-type]
            attempts=result.attempts,
            usage=usage_to_proto(result.usage),
        )

    async def SelectTools(
        self, request: planner_pb2.SelectToolsRequest, context: Context
    ) -> planner_pb2.SelectToolsResponse:
        selection = await select_tools(
            await self._model(context, "fast", request.workflow_id),
            request.query,
            _tools(request.tools),
            pinned=list(request.pinned),
            max_tools=request.max_tools,
        )
        return planner_pb2.SelectToolsResponse(
            tool_names=selection.names,
            fell_back=selection.fell_back,
            usage=usage_to_proto(selection.usage),
        )

    async def Plan(
        self, request: planner_pb2.PlanRequest, context: Context
    ) -> planner_pb2.PlanResponse:
        if not request.query.strip():
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "query must not be empty")
        try:
            outcome = await make_plan(
                await self._model(context, "reasoning", request.workflow_id),
                request.query,
                _tools(request.tools),
                request.context,
                self._models.roster,
            )
        except ContextOverflowError as exc:
            await _abort(context, grpc.StatusCode.OUT_OF_RANGE, str(exc))
        except StructuredOutputError as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"no valid plan: {exc}")
        return planner_pb2.PlanResponse(
            steps=[
                planner_pb2.PlanStep(
                    id=s.id,
                    task=s.task,
                    dependencies=list(s.dependencies),
                    tool_hint=s.tool_hint,
                    model_hint=s.model_hint,
                )
                for s in outcome.plan.steps
            ],
            usage=usage_to_proto(outcome.usage),
            repairs=list(outcome.plan.repairs),
            level=int(outcome.level),  # type: ignore[arg-type]
            attempts=outcome.attempts,
        )

    async def AnalyzePlan(
        self, request: planner_pb2.AnalyzePlanRequest, context: Context
    ) -> planner_pb2.AnalyzePlanResponse:
        if not request.query.strip():
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "query must not be empty")
        results = [StepResult(r.step_id, r.task, r.result, r.failed) for r in request.results]
        try:
            analysis = await analyze_plan(
                await self._model(context, "general", request.workflow_id), request.query, results
            )
        except ContextOverflowError as exc:
            await _abort(context, grpc.StatusCode.OUT_OF_RANGE, str(exc))
        except StructuredOutputError as exc:
            await _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"no usable analysis: {exc}")
        return planner_pb2.AnalyzePlanResponse(
            achieved=analysis.achieved,
            confidence=analysis.confidence,
            answer=analysis.answer,
            reasoning=analysis.reasoning,
            usage=usage_to_proto(analysis.usage),
        )

    async def Route(
        self, request: planner_pb2.RouteRequest, context: Context
    ) -> planner_pb2.RouteResponse:
        if not request.query.strip():
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "query must not be empty")
        decision = await route(
            await self._model(context, "fast", request.workflow_id), request.query
        )
        return planner_pb2.RouteResponse(
            mode=_MODES[decision.mode],
            estimated_complexity=decision.estimated_complexity,
            reasoning=decision.reasoning,
            fast_path=decision.fast_path,
            usage=usage_to_proto(decision.usage),
        )
