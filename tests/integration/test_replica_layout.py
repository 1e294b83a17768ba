"""Where `shuttle up --replicas` puts each process, and what each one is told."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from cli.launcher import LaunchError, Supervisor
from cli.main import banner
from cli.replicas import ALL_SERVICES, parse_spec
from shuttle.settings import Settings
from tests.support.stack import free_ports


def shared(**overrides: Any) -> Settings:
    """Settings with the shared state replicas need (never dialled here)."""
    return Settings(
        database_url="postgresql+asyncpg://postgres@127.0.0.1:5432/x",
        redis_url="redis://127.0.0.1:6379/0",
        **overrides,
    )


def test_a_number_replicates_every_service_and_a_list_only_those_named() -> None:
    assert parse_spec("3") == dict.fromkeys(ALL_SERVICES, 3)
    assert parse_spec("executor=3, gateway=2") == {
        "events": 1,
        "tools": 1,
        "planner": 1,
        "executor": 3,
        "gateway": 2,
    }


def test_replicas_listen_ten_ports_apart_and_gateways_side_by_side(tmp_path: Path) -> None:
    supervisor = Supervisor(shared(), tmp_path, replicas=parse_spec("executor=3,gateway=2"))
    layout = {p.name: p.port for p in supervisor.endpoints}
    assert layout == {
        "events": 50051,
        "tools": 50052,
        "planner": 50053,
        "executor": 50054,
        "executor-2": 50064,
        "executor-3": 50074,
        "gateway": 8080,
        "gateway-2": 8081,
    }


def test_every_process_dials_every_replica_and_gateways_share_a_ticket_secret(
    tmp_path: Path,
) -> None:
    supervisor = Supervisor(shared(), tmp_path, replicas=parse_spec("2"))
    envs = {p.name: supervisor.process_environment(p) for p in supervisor.endpoints}
    for env in envs.values():
        assert env["SHUTTLE_EXECUTOR_ADDR"] == "127.0.0.1:50054,127.0.0.1:50064"
        assert env["SHUTTLE_EVENTS_ADDR"] == "127.0.0.1:50051,127.0.0.1:50061"
    assert envs["executor-2"]["SHUTTLE_EXECUTOR_PORT"] == "50064"
    assert envs["gateway-2"]["SHUTTLE_GATEWAY_PORT"] == "8081"
    gateways = [envs["gateway"], envs["gateway-2"]]
    assert all(env["SHUTTLE_GATEWAY_REPLICAS"] == "2" for env in gateways)
    secrets = {env["SHUTTLE_TICKET_SECRET"] for env in gateways}
    assert len(secrets) == 1 and len(secrets.pop()) >= 32
    # A new secret per launch unless the operator set one.
    again = Supervisor(shared(), tmp_path, replicas=parse_spec("2"))
    assert again.ticket_secret != supervisor.ticket_secret
    pinned = Supervisor(shared(ticket_secret="s" * 40), tmp_path, replicas={})
    assert pinned.ticket_secret == "s" * 40


def test_without_replicas_the_launch_is_unchanged(tmp_path: Path) -> None:
    supervisor = Supervisor(Settings(), tmp_path)
    assert [p.name for p in supervisor.endpoints] == list(ALL_SERVICES)
    for point in supervisor.endpoints:
        env = supervisor.process_environment(point)
        assert not any(k.endswith("_ADDR") and k.startswith("SHUTTLE_") for k in env)
        assert "SHUTTLE_GATEWAY_REPLICAS" not in env


def test_a_replicas_busy_port_is_refused_by_name(tmp_path: Path) -> None:
    events, tools, planner, gateway = free_ports(4)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        settings = shared(
            events_port=events,
            tools_port=tools,
            planner_port=planner,
            executor_port=taken - 10,
            gateway_port=gateway,
            data_dir=tmp_path,
        )
        supervisor = Supervisor(settings, tmp_path / "logs", replicas=parse_spec("executor=2"))
        with pytest.raises(
            LaunchError, match=rf"port {taken} \(executor-2\).*SHUTTLE_EXECUTOR_PORT"
        ):
            supervisor.start()
    assert supervisor.processes == {}


def test_the_banner_lists_every_replica(tmp_path: Path) -> None:
    supervisor = Supervisor(shared(), tmp_path, replicas=parse_spec("executor=2,gateway=2"))
    text = banner(supervisor.settings, supervisor.endpoints, "logs", "token")
    for name, address in [
        ("executor-2", "127.0.0.1:50064"),
        ("executor", "127.0.0.1:50054"),
        ("gateway-2", "127.0.0.1:8081"),
    ]:
        assert any(line.split()[:2] == [name, address] for line in text.splitlines()), text


def test_the_banner_names_the_shared_hot_tier(tmp_path: Path) -> None:
    supervisor = Supervisor(shared(), tmp_path, replicas=parse_spec("2"))
    assert "hot tier in Redis" in banner(supervisor.settings, supervisor.endpoints, "l", "t")
    alone = Supervisor(Settings(redis_url=""), tmp_path)
    assert "hot tier in-process" in banner(alone.settings, alone.endpoints, "l", "t")


def test_each_process_gets_a_metrics_port_of_its_own(tmp_path: Path) -> None:
    supervisor = Supervisor(
        shared(metrics_port=9464), tmp_path, replicas=parse_spec("executor=2,gateway=2")
    )
    given = {
        p.name: supervisor.process_environment(p)["SHUTTLE_METRICS_PORT"]
        for p in supervisor.endpoints
    }
    assert given == {
        "events": "9464",
        "tools": "9465",
        "planner": "9466",
        "executor": "9467",
        "executor-2": "9468",
        "gateway": "9469",
        "gateway-2": "9470",
    }
    text = banner(supervisor.settings, supervisor.endpoints, "logs", "token")
    assert "127.0.0.1:50064   gRPC; metrics on port 9468" in text, text
    unset = Supervisor(shared(), tmp_path, replicas=parse_spec("2"))
    assert all(p.metrics_port == 0 for p in unset.endpoints)


def test_a_busy_metrics_port_is_refused_by_name(tmp_path: Path) -> None:
    events, tools, planner, executor, gateway = free_ports(5)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        settings = shared(
            events_port=events,
            tools_port=tools,
            planner_port=planner,
            executor_port=executor,
            gateway_port=gateway,
            metrics_port=taken - 1,
            data_dir=tmp_path,
        )
        supervisor = Supervisor(settings, tmp_path / "logs")
        with pytest.raises(LaunchError, match=rf"port {taken} \(tools\).*SHUTTLE_METRICS_PORT"):
            supervisor.start()
    assert supervisor.processes == {}
