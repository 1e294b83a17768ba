"""A ToolProvider (gRPC, in the test process) whose tools have a counted side effect: each
execution is recorded with its workflow, call id and idempotency key, so a test can tell that
a call took effect exactly once. A call can be held before its effect (the tool is still
working) or after it (the effect happened, the reply has not left), until the test lets go.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from shuttle.v1 import tool_provider_pb2, tool_provider_pb2_grpc, tools_pb2
from tests.chaos.takeover_model import APPROVED_TOOL, PROVIDER_TOOL

HOLD_LIMIT_SECONDS = 300.0
"""A held call goes on after this long even if the test never lets it go."""
PARAMETERS = json.dumps(
    {
        "type": "object",
        "properties": {"note": {"type": "string", "maxLength": 2000}},
        "required": ["note"],
        "additionalProperties": False,
    }
)


@dataclass(frozen=True)
class Execution:
    workflow_id: str
    call_id: str
    idempotency_key: str
    """What the tools service sent as the key; empty from one that sends none."""
    tool_name: str
    note: str


@dataclass
class ProviderHold:
    """Every call whose note contains `tag` waits, before or after its effect."""

    tag: str
    before_effect: bool
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


class EffectProvider(tool_provider_pb2_grpc.ToolProviderServicer):
    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self._holds: list[ProviderHold] = []
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hold_before_effect(self, tag: str) -> ProviderHold:
        return self._add(ProviderHold(tag, before_effect=True))

    def hold_after_effect(self, tag: str) -> ProviderHold:
        return self._add(ProviderHold(tag, before_effect=False))

    def release_all(self) -> None:
        with self._lock:
            holds, self._holds = self._holds, []
        for hold in holds:
            hold.release()

    def effects(self, workflow_id: str) -> Counter[str]:
        """How many times each call id of `workflow_id` took effect."""
        with self._lock:
            return Counter(e.call_id for e in self.executions if e.workflow_id == workflow_id)

    def keys(self, workflow_id: str) -> Counter[str]:
        """How many times each idempotency key of `workflow_id` took effect."""
        with self._lock:
            return Counter(
                e.idempotency_key for e in self.executions if e.workflow_id == workflow_id
            )

    def ListTools(
        self, request: tool_provider_pb2.ProviderListToolsRequest, context: grpc.ServicerContext
    ) -> tool_provider_pb2.ProviderListToolsResponse:
        return tool_provider_pb2.ProviderListToolsResponse(
            tools=[
                tools_pb2.ToolSpec(
                    name=PROVIDER_TOOL,
                    description="Records an effect once per call (the chaos tests count it).",
                    parameters_json=PARAMETERS,
                ),
                tools_pb2.ToolSpec(
                    name=APPROVED_TOOL,
                    description="Records an effect once a human approved the call.",
                    parameters_json=PARAMETERS,
                    flags=tools_pb2.ToolFlags(requires_approval=True),
                ),
            ]
        )

    def Execute(
        self, request: tool_provider_pb2.ProviderExecuteRequest, context: grpc.ServicerContext
    ) -> tool_provider_pb2.ProviderExecuteResponse:
        note = str(json.loads(request.arguments_json or "{}").get("note", ""))
        hold = self._hold_for(note)
        if hold is not None and hold.before_effect:
            hold.arrived.set()
            hold.released.wait(HOLD_LIMIT_SECONDS)
        execution = Execution(
            workflow_id=request.workflow_id,
            call_id=request.call_id,
            # Absent from a ProviderExecuteRequest that predates idempotency keys.
            idempotency_key=str(getattr(request, "idempotency_key", "")),
            tool_name=request.tool_name,
            note=note,
        )
        with self._lock:
            self.executions.append(execution)
            times = sum(
                1
                for e in self.executions
                if e.call_id == request.call_id and (e.workflow_id == request.workflow_id)
            )
        if hold is not None and not hold.before_effect:
            hold.arrived.set()
            hold.released.wait(HOLD_LIMIT_SECONDS)
        return tool_provider_pb2.ProviderExecuteResponse(output=f"effect {times} recorded")

    def start(self) -> EffectProvider:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        tool_provider_pb2_grpc.add_ToolProviderServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        self.release_all()
        if self._server is not None:
            self._server.stop(grace=None)

    def _add(self, hold: ProviderHold) -> ProviderHold:
        with self._lock:
            self._holds.append(hold)
        return hold

    def _hold_for(self, note: str) -> ProviderHold | None:
        with self._lock:
            return next((h for h in self._holds if not h.released.is_set() and h.tag in note), None)
