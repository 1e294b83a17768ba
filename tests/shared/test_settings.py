from __future__ import annotations

import subprocess
import sys

import pytest

from shuttle.settings import Settings, SettingsError, is_loopback, load_settings


def test_defaults_are_the_embedded_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "SHUTTLE_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert settings.uses_demo_model
    assert settings.sqlalchemy_url == "sqlite+aiosqlite:///var/shuttle.db"
    assert settings.grpc_target("events") == "127.0.0.1:50051"
    assert (settings.gateway_host, settings.gateway_port) == ("127.0.0.1", 8080)


def test_openai_variables_select_a_real_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert not load_settings().uses_demo_model


def test_a_wildcard_bind_is_reached_on_loopback_and_an_explicit_address_wins() -> None:
    settings = Settings(tools_host="0.0.0.0", tools_port=6000, planner_addr="planner:7000")
    assert settings.grpc_target("tools") == "127.0.0.1:6000"
    assert settings.grpc_target("planner") == "planner:7000"


def test_a_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHUTTLE_EVENTS_PORT", "not-a-port")
    with pytest.raises(SettingsError) as failure:
        load_settings()
    assert "SHUTTLE_EVENTS_PORT" in str(failure.value)
    assert "not-a-port" in str(failure.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.1", "example.com", "::"])
def test_other_addresses(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    ("variable", "value"), [("SHUTTLE_PLANNER_PORT", "99999"), ("SHUTTLE_EVENT_LOOP", "trio")]
)
def test_a_service_process_refuses_bad_configuration_in_one_line(variable: str, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.planner"],
        env={"SHUTTLE_PLANNER_PORT": "0", variable: value, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert variable in result.stderr
    assert "Traceback" not in result.stderr


def test_the_gateway_refuses_a_public_address_without_auth() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway"],
        env={"SHUTTLE_GATEWAY_HOST": "0.0.0.0", "SHUTTLE_GATEWAY_PORT": "0", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0 without authentication" in result.stderr
    assert "SHUTTLE_AUTH=required" in result.stderr
