"""The grpc-web API: the shuttle.v1 methods a browser may call, and how each is served.

A browser reads and follows its workflows, starts runs, steers them and decides approvals.
What Shuttle's components do for one another (appending events, creating workflows, leases,
deleting logs, the planner, running a tool outside a run) is refused by name: a tenant's key
reaches no further than the gateway's own task path does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import MethodDescriptor

from gateway.edge.grpc_web_status import RpcRefusal
from shuttle.v1 import events_pb2, executor_pb2, planner_pb2, tools_pb2  # noqa: F401  (registers)

PACKAGE = "shuttle.v1"
SERVICE_BACKENDS = {
    "EventService": "events",
    "ExecutorService": "executor",
    "ToolService": "tools",
    "PlannerService": "planner",
}


class Serving(Enum):
    FORWARD = "forwarded to its service with the caller's tenant"
    START = "started by the gateway as POST /api/v1/tasks starts a task"
    START_AND_FOLLOW = "started as START, then its log followed through the events client"


@dataclass(frozen=True)
class WebMethod:
    serving: Serving = Serving.FORWARD
    ticket_reads: bool = False
    """A stream ticket may call it, for the one workflow the ticket names."""
    decided_by_caller: bool = False
    """The request's `decided_by` is set to the caller's API key id, whatever it says."""


_READ = WebMethod(ticket_reads=True)

GRPC_WEB_METHODS: dict[str, WebMethod] = {
    "EventService/GetWorkflow": _READ,
    "EventService/Stream": _READ,
    "EventService/StreamBatches": _READ,
    "EventService/List": _READ,
    "ExecutorService/GetRun": _READ,
    "ExecutorService/StartRun": WebMethod(Serving.START),
    "ExecutorService/Run": WebMethod(Serving.START_AND_FOLLOW),
    "ExecutorService/Control": WebMethod(),
    "ExecutorService/Interrupt": WebMethod(),
    "ToolService/ListTools": WebMethod(),
    "ToolService/ListApprovals": WebMethod(),
    "ToolService/DecideApproval": WebMethod(decided_by_caller=True),
}
"""Every method the grpc-web face serves, by `Service/Method`; the rest are refused."""


def web_method(service: str, name: str) -> tuple[WebMethod, MethodDescriptor]:
    """How `service/name` is served and its descriptor; UNIMPLEMENTED for a method shuttle.v1
    does not have, PERMISSION_DENIED for one it has but browsers may not call."""
    if service not in SERVICE_BACKENDS:
        raise RpcRefusal(grpc.StatusCode.UNIMPLEMENTED, f"unknown service {PACKAGE}.{service}")
    descriptor = descriptor_pool.Default().FindServiceByName(f"{PACKAGE}.{service}")
    method = descriptor.methods_by_name.get(name)
    if method is None:
        raise RpcRefusal(
            grpc.StatusCode.UNIMPLEMENTED, f"unknown method {PACKAGE}.{service}/{name}"
        )
    served = GRPC_WEB_METHODS.get(f"{service}/{name}")
    if served is None:
        raise RpcRefusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{PACKAGE}.{service}/{name} is not part of the grpc-web API, which reads "
            "workflows, starts and steers runs and decides approvals; the other methods "
            "are for Shuttle's own components",
        )
    return served, method
