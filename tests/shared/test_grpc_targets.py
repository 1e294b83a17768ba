"""Client targets: lists of replicas become one gRPC target; malformed ones are refused
with the variable named, at start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shuttle.grpc_service_config import IDEMPOTENT_METHODS, service_config
from shuttle.grpc_targets import TargetError, client_target
from shuttle.settings import Settings, SettingsError, load_settings
from shuttle.v1 import events_pb2, executor_pb2, planner_pb2, tools_pb2


@pytest.mark.parametrize(
    ("value", "target"),
    [
        ("127.0.0.1:50054", "127.0.0.1:50054"),
        ("shuttle-executor:50054", "shuttle-executor:50054"),
        ("[::1]:50054", "[::1]:50054"),
        ("10.0.0.5:50054, 10.0.0.6:50064", "ipv4:10.0.0.5:50054,10.0.0.6:50064"),
        ("[::1]:50054,[fd00::2]:50054", "ipv6:[::1]:50054,[fd00::2]:50054"),
        ("dns:///shuttle-executor-headless.shuttle:50054", None),
        ("dns://10.0.0.10/shuttle-executor-headless:50054", None),
        ("ipv4:10.0.0.5:1,10.0.0.6:2", None),
        ("unix:///run/shuttle/executor.sock", None),
    ],
)
def test_targets_gRPC_resolves_to_every_replica(value: str, target: str | None) -> None:
    assert client_target(value, "SHUTTLE_EXECUTOR_ADDR") == (target or value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("a:1,b:2", "IP addresses only"),
        ("10.0.0.5:1,[::1]:2", "mixes IPv4 and IPv6"),
        ("10.0.0.5:50054,", "empty entry"),
        ("10.0.0.5", "no port"),
        ("::1:50054", "brackets"),
        ("10.0.0.5:99999", "1 to 65535"),
        ("dns:///shuttle-executor", "no port"),
        ("dns://shuttle-executor:50054", "three slashes"),
        ("dns:///a:1,b:2", "one host"),
        ("not a host:1", "neither an IP address nor a host name"),
        (" ", "empty"),
    ],
)
def test_a_malformed_target_is_refused_naming_the_variable(value: str, problem: str) -> None:
    with pytest.raises(TargetError) as refused:
        client_target(value, "SHUTTLE_EXECUTOR_ADDR")
    assert str(refused.value).startswith("SHUTTLE_EXECUTOR_ADDR=")
    assert problem in str(refused.value)


def test_settings_turn_a_list_into_one_target() -> None:
    settings = Settings(executor_addr="127.0.0.1:50054,127.0.0.1:50064")
    assert settings.grpc_target("executor") == "ipv4:127.0.0.1:50054,127.0.0.1:50064"


def test_load_settings_refuses_a_malformed_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHUTTLE_EXECUTOR_ADDR", "executor-a:50054,executor-b:50054")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert "SHUTTLE_EXECUTOR_ADDR" in str(refused.value)
    assert "dns:///" in str(refused.value)


def test_a_service_refuses_to_start_with_a_malformed_list() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "services.planner"],
        env={"SHUTTLE_EVENTS_ADDR": "127.0.0.1:50051,"},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 2
    assert "SHUTTLE_EVENTS_ADDR" in finished.stderr
    assert "empty entry" in finished.stderr


def test_every_method_retried_exists_and_every_channel_balances() -> None:
    config = json.loads(service_config())
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    services = {
        d.services_by_name[name].full_name: d.services_by_name[name]
        for d in (events_pb2.DESCRIPTOR, tools_pb2.DESCRIPTOR, planner_pb2.DESCRIPTOR)
        for name in d.services_by_name
    }
    executor = executor_pb2.DESCRIPTOR.services_by_name["ExecutorService"]
    services[executor.full_name] = executor
    for service, methods in IDEMPOTENT_METHODS.items():
        assert set(methods) <= set(services[service].methods_by_name), service
    retried = {(name["service"], name["method"]) for name in config["methodConfig"][0]["name"]}
    assert ("shuttle.v1.ToolService", "Execute") not in retried
    assert ("shuttle.v1.EventService", "CreateWorkflow") not in retried
    # A resent claim would take runs its caller never hears of.
    assert ("shuttle.v1.EventService", "ClaimRuns") not in retried
    assert ("shuttle.v1.EventService", "Append") in retried
