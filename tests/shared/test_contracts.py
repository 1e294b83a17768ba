"""The shuttle.v1 contract: every service, RPC and the 35 event types that clients are built
against, exactly as they are named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc_tools
import pytest

from shuttle.envelope import EVENT_TYPE_NAMES, type_name, type_value
from shuttle.v1 import common_pb2, events_pb2, executor_pb2, planner_pb2, tools_pb2

ROOT = Path(__file__).resolve().parents[2]

CONTRACT_EVENT_TYPES = [
    "WORKFLOW_STARTED",
    "WORKFLOW_COMPLETED",
    "WORKFLOW_PAUSING",
    "WORKFLOW_PAUSED",
    "WORKFLOW_RESUMED",
    "WORKFLOW_CANCELLING",
    "WORKFLOW_CANCELLED",
    "AGENT_STARTED",
    "AGENT_THINKING",
    "AGENT_COMPLETED",
    "TOOL_INVOKED",
    "TOOL_OBSERVATION",
    "TEAM_RECRUITED",
    "TEAM_RETIRED",
    "TEAM_STATUS",
    "DEPENDENCY_SATISFIED",
    "MESSAGE_SENT",
    "MESSAGE_RECEIVED",
    "LLM_PROMPT",
    "LLM_PARTIAL",
    "LLM_OUTPUT",
    "PROGRESS",
    "DATA_PROCESSING",
    "WAITING",
    "ERROR_OCCURRED",
    "ERROR_RECOVERY",
    "APPROVAL_REQUESTED",
    "APPROVAL_DECISION",
    "WORKSPACE_UPDATED",
    "ROLE_ASSIGNED",
    "STATUS_UPDATE",
    "BUDGET_THRESHOLD",
    "THREAD_MESSAGE_DELTA",
    "THREAD_MESSAGE_COMPLETED",
    "STREAM_END",
]

CONTRACT_RPCS = {
    (events_pb2, "EventService"): {"CreateWorkflow", "GetWorkflow", "Append", "Stream", "List"},
    (planner_pb2, "PlannerService"): {
        "StructuredCall",
        "SelectTools",
        "Plan",
        "AnalyzePlan",
        "Route",
    },
    (tools_pb2, "ToolService"): {"ListTools", "Execute", "DecideApproval", "ListApprovals"},
    (executor_pb2, "ExecutorService"): {"StartRun", "Run", "GetRun", "Control", "Interrupt"},
}


def test_the_enum_holds_exactly_the_35_catalogue_types() -> None:
    assert len(CONTRACT_EVENT_TYPES) == 35
    assert list(EVENT_TYPE_NAMES) == CONTRACT_EVENT_TYPES
    assert common_pb2.EVENT_TYPE_UNSPECIFIED == 0


def test_type_names_and_values_agree_with_the_enum_in_every_spelling() -> None:
    for name in CONTRACT_EVENT_TYPES:
        value = common_pb2.EventType.Value(f"EVENT_TYPE_{name}")
        assert type_name(value) == name
        for spelling in (name, name.lower(), f" EVENT_TYPE_{name} "):
            assert type_value(spelling) == value
    assert type_name(common_pb2.EVENT_TYPE_UNSPECIFIED) == "UNSPECIFIED"
    with pytest.raises(ValueError):
        type_name(999)
    with pytest.raises(ValueError, match="unknown event type 'UNSPECIFIED'"):
        type_value("UNSPECIFIED")


def test_every_service_declares_the_rpcs_of_the_design() -> None:
    for (module, service), rpcs in CONTRACT_RPCS.items():
        descriptor = module.DESCRIPTOR.services_by_name[service]
        assert descriptor.full_name == f"shuttle.v1.{service}"
        # The design's RPCs are the floor; services may add more.
        assert rpcs <= {m.name for m in descriptor.methods}
    stream = events_pb2.DESCRIPTOR.services_by_name["EventService"].methods_by_name["Stream"]
    assert stream.server_streaming and not stream.client_streaming


def test_the_protos_compile_with_only_the_proto_include_path(tmp_path: Path) -> None:
    """Other languages compile with `-I proto`; imports must resolve from there alone."""
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
    assert len(protos) == 6
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            "proto",
            f"-I{well_known}",
            f"--descriptor_set_out={tmp_path / 'set.pb'}",
            *protos,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "set.pb").stat().st_size > 0
