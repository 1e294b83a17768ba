"""Typed settings, read once per process from ``SHUTTLE_*`` (and ``OPENAI_*``) variables."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from .grpc_targets import client_target
from .paced_signal import DEFAULT_SECONDS_PER_WAITER, SECONDS_PER_SSE_CLIENT

DEFAULT_PORTS = {"events": 50051, "tools": 50052, "planner": 50053, "executor": 50054}
DEFAULT_GATEWAY_PORT = 8080
DEFAULT_MAX_BUDGET_TOKENS = 10_000_000
DEFAULT_MAX_OUTPUT_TOKENS = 1024
# How far past the events service's clock a producer's event timestamp may be: clocks of
# the same deployment differ by far less; a stamp beyond it is a broken clock or a bug.
DEFAULT_EVENTS_MAX_FUTURE_SECONDS = 300.0


class AuthMode(StrEnum):
    OFF = "off"
    REQUIRED = "required"


class SettingsError(Exception):
    """Raised with a message naming the bad variable."""


class McpServerConfig(BaseModel):
    """One MCP server: a command to run over stdio, or a streamable-HTTP URL."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str = ""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("an MCP server needs exactly one of 'command' (stdio) or 'url'")
        return self


class Settings(BaseSettings):
    """Everything a Shuttle process can be configured with. Each service reads what it needs."""

    model_config = SettingsConfigDict(env_prefix="SHUTTLE_", extra="ignore", frozen=True)

    # Where each gRPC service listens, and where clients find it.
    events_host: str = "127.0.0.1"
    events_port: int = Field(DEFAULT_PORTS["events"], ge=0, le=65535)
    tools_host: str = "127.0.0.1"
    tools_port: int = Field(DEFAULT_PORTS["tools"], ge=0, le=65535)
    planner_host: str = "127.0.0.1"
    planner_port: int = Field(DEFAULT_PORTS["planner"], ge=0, le=65535)
    executor_host: str = "127.0.0.1"
    executor_port: int = Field(DEFAULT_PORTS["executor"], ge=0, le=65535)
    # Client targets; empty means "<host>:<port>" of the settings above. Each may list
    # several replicas (`10.0.0.5:50051,10.0.0.6:50051`) or be a name resolving to all of them
    # (`dns:///shuttle-events-headless:50051`); calls are spread round_robin over them
    # (shuttle/grpc_targets.py, shuttle/grpc_service_config.py).
    events_addr: str = ""
    tools_addr: str = ""
    planner_addr: str = ""
    executor_addr: str = ""
    # Each gRPC server ends a connection this long after it opened (a GOAWAY: new calls go
    # on a new connection, which re-resolves the target, so replicas added since get calls),
    # and gives the calls in flight on it the grace to finish; streams still open then are
    # resumed by their callers. 0: connections live on.
    grpc_max_connection_age_seconds: float = Field(300.0, ge=0)
    grpc_max_connection_age_grace_seconds: float = Field(30.0, ge=0)
    # The credential every gRPC call between Shuttle's components carries (authorization:
    # Bearer); unset, the services accept only what reaches them on loopback.
    internal_token: str = Field("", repr=False)
    # Mutual TLS between components: this process's certificate and key, and the CA that
    # signed every component's certificate (all three, or none).
    grpc_tls_cert: Path | None = None
    grpc_tls_key: Path | None = None
    grpc_tls_ca: Path | None = None

    gateway_host: str = "127.0.0.1"
    gateway_port: int = Field(DEFAULT_GATEWAY_PORT, ge=0, le=65535)
    auth: AuthMode = AuthMode.OFF
    default_tenant: str = "default"
    # Requests per API key (or per client while auth is off), in `limits` notation.
    rate_limit: str = "600/minute"
    # HMAC key of EventSource stream tickets; empty: a random one per gateway process, which
    # only a single gateway can use (a ticket must pass on whichever replica it reaches).
    ticket_secret: str = Field("", repr=False)
    # How many gateway replicas serve this deployment (`shuttle up --replicas` and the k8s
    # manifests set it); more than one requires ticket_secret.
    gateway_replicas: int = Field(1, ge=1)
    ticket_ttl_seconds: int = Field(300, ge=1, le=86_400)
    # Browser origins allowed to call the gateway cross-origin (grpc-web, API); comma list.
    cors_origins: str = ""
    # SSE watchers of one workflow share one upstream call; frames a slow client has not taken
    # are kept up to this many bytes, and a client further behind reads on its own call.
    sse_feed_buffer_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # SSE clients of one workflow are woken in paced rounds, as the events service's readers
    # are (events_fanout_seconds_per_reader below); a socket write costs more than a gRPC
    # message, hence the larger default.
    sse_fanout_seconds_per_client: float = Field(SECONDS_PER_SSE_CLIENT, ge=0, le=0.01)
    # The largest request body the gateway reads (grpc-web calls included), and how much of a
    # session's earlier turns, newest first, a new turn's run is given. Together they keep a
    # run's StartRun under gRPC's 16 MiB message limit.
    gateway_max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=8 * 1024 * 1024)
    session_history_max_bytes: int = Field(4 * 1024 * 1024, ge=0, le=7 * 1024 * 1024)
    # The largest artifact the gateway serves (GET /api/v1/tasks/{id}/artifacts/{name}).
    artifact_max_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    # A chat completion's messages: how many, and how long each one's content may be; the
    # earlier ones each become a stored turn, so their count is what a request costs.
    openai_max_messages: int = Field(1_000, ge=1, le=100_000)
    openai_max_message_chars: int = Field(100_000, ge=1, le=8 * 1024 * 1024)
    # The most tokens one run may be given as its budget (StartRun, and the task API before
    # it), so no caller can ask for a run without a meaningful bound.
    max_budget_tokens: int = Field(DEFAULT_MAX_BUDGET_TOKENS, ge=1, le=2**63 - 1)
    # An Idempotency-Key reserved this long ago whose run never started (its request died
    # part-way) is taken over by the next request with the key instead of answering 409.
    idempotency_reservation_seconds: float = Field(60.0, gt=0, le=86_400)
    # Used by the `shuttle` CLI: where the gateway is and the key to present.
    gateway_url: str = ""
    api_key: str = ""

    database_url: str = ""
    data_dir: Path = Path("var")
    redis_url: str = ""
    # Prepended to every Redis key, so several deployments (or test runs) can share a Redis.
    redis_key_prefix: str = "shuttle:"
    # Connections each events replica opens for Redis commands; a burst beyond them waits
    # for a free one. Followed workflows share one more connection (one blocking read).
    redis_max_connections: int = Field(64, ge=1, le=10_000)

    # The events service's log: hot tier size and age, SQL retention, stream fallback poll.
    events_hot_max_events: int = Field(10_000, ge=1)
    # Bytes the hot tier holds, in total on each replica and per workflow (each Redis stream
    # too): past either bound the oldest events go; durable ones are still read from SQL.
    # The total leaves an events process of 512 MiB room for its encoder cache (64 MiB) and
    # the requests in flight.
    events_hot_max_bytes: int = Field(128 * 1024 * 1024, ge=1)
    events_hot_max_workflow_bytes: int = Field(32 * 1024 * 1024, ge=1)
    # Bytes of events one List page carries (its first event whatever its size): under
    # gRPC's 16 MiB message limit with room for one more 4 MiB event.
    events_list_max_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024, le=12 * 1024 * 1024)
    events_hot_ttl_seconds: float = Field(24 * 3600.0, gt=0)
    events_retention_days: float = Field(90.0, gt=0)
    events_purge_interval_seconds: float = Field(3600.0, gt=0)
    events_poll_seconds: float = Field(1.0, gt=0)
    events_durable_llm_prompt: bool = False
    events_max_future_seconds: float = Field(DEFAULT_EVENTS_MAX_FUTURE_SECONDS, gt=0)
    # How often each events replica looks for runs no executor took over (below).
    events_lease_sweep_seconds: float = Field(5.0, gt=0)
    # A run whose lease lapsed (or was released) is taken over by another executor; one left
    # unclaimed this long past its lease's expiry has no executor to run it and is failed as
    # EXECUTOR_LOST.
    events_orphan_seconds: float = Field(120.0, gt=0)
    # While a log keeps changing, its StreamBatches readers in the events service are woken in
    # rounds at least this many seconds per reader apart, capped at 0.1 s; a change after a
    # quiet spell still wakes them at once. 0: wake on every change.
    events_fanout_seconds_per_reader: float = Field(DEFAULT_SECONDS_PER_WAITER, ge=0, le=0.01)
    # Active (pending, running or paused) workflows a tenant may have at once; 0: no limit.
    tenant_max_runs: int = Field(100, ge=0)

    # LLM: one OpenAI-compatible endpoint, or the offline demo model when unset.
    openai_base_url: str = Field(
        "", validation_alias=AliasChoices("OPENAI_BASE_URL", "SHUTTLE_OPENAI_BASE_URL")
    )
    openai_api_key: str = Field(
        "", validation_alias=AliasChoices("OPENAI_API_KEY", "SHUTTLE_OPENAI_API_KEY")
    )
    model: str = ""
    # Several named endpoints with roles, abilities and prices (docs/models.md); wins over
    # OPENAI_BASE_URL when set.
    models_file: Path | None = None
    llm_timeout_seconds: float = Field(120.0, gt=0)
    # The output cap sent as `max_tokens` with every call (a models file's
    # `max_output_tokens` wins). Without one, a small model that rambles writes until its
    # context is full and its call times out; 1024 tokens hold any tool call, JSON action or
    # a page of answer, and take under a minute even at a CPU model's 20 tokens a second.
    llm_max_output_tokens: int = Field(DEFAULT_MAX_OUTPUT_TOKENS, ge=1)
    llm_max_retries: int = Field(2, ge=0, le=10)
    llm_retry_base_seconds: float = Field(0.5, ge=0)
    llm_retry_max_seconds: float = Field(60.0, ge=0)
    # The OpenAI SDK's HTTP transport: aiohttp, or httpx (the SDK's own default). aiohttp
    # costs the executor less CPU per call with many calls in flight.
    llm_http_client: Literal["aiohttp", "httpx"] = "aiohttp"

    max_iterations: int = Field(50, ge=1, le=1000)
    # How long a run may take, from WORKFLOW_STARTED (a run taken over keeps its deadline).
    # Past it the run stops where it stands and answers from what it has found: a model that
    # never settles costs ten minutes, not an executor slot for good.
    run_timeout_seconds: float = Field(600.0, gt=0)
    tool_timeout_seconds: float = Field(30.0, gt=0)

    # ReAct engine defaults for every agent of this deployment (each run may override some).
    react_use_native_tools: bool = True
    react_reflection_interval: int = Field(6, ge=0)
    react_cycle_threshold: int = Field(3, ge=0)
    react_completion_check: bool = True
    react_completion_check_min_tools: int = Field(3, ge=1)
    react_tool_selection_threshold: int = Field(12, ge=0)
    react_tool_selection_max: int = Field(6, ge=1)
    react_token_budget: int = Field(0, ge=0)
    react_budget_warn_percent: float = Field(80.0, gt=0, le=100)
    react_context_ratio: float = Field(0.8, gt=0, le=1)
    react_compact_keep_recent: int = Field(6, ge=1)
    # DAG mode (COMPLEX): steps at once, plan rounds, the confidence that ends replanning,
    # and each step agent's iteration cap and time limit.
    dag_max_parallel: int = Field(5, ge=1, le=50)
    dag_max_rounds: int = Field(3, ge=1, le=10)
    dag_confidence_threshold: float = Field(0.8, ge=0, le=1)
    dag_step_max_iterations: int = Field(15, ge=1, le=1000)
    dag_step_timeout_seconds: float = Field(600.0, gt=0)
    # Until a models registry says otherwise: the model's context window, in tokens.
    context_tokens: int = Field(128_000, ge=1_000)
    # The executor's event emitter: largest Append batch, and how long an unreachable
    # events service is ridden out before the run fails (the gateway's SSE streams too).
    events_batch_max: int = Field(256, ge=1)
    events_retry_seconds: float = Field(30.0, gt=0)
    # How long a run's batch waits for more events after its oldest one (0: sent at once);
    # an iteration's events then share an Append (services/executor/emitter.py).
    events_linger_ms: float = Field(5.0, ge=0, le=1000)
    # The run lease: an executor renews it every third of this while a run is alive; a run
    # whose lease lapses (its executor died) is taken over by another executor, or failed by
    # the events service as EXECUTOR_LOST when none does (SHUTTLE_EVENTS_ORPHAN_SECONDS).
    run_lease_seconds: float = Field(15.0, ge=0.3, le=3600)

    # Prometheus metrics on their own HTTP port, bound to the process's host (0: off). A
    # gRPC service serves none without it; the gateway then serves /metrics on its public
    # port, and with it there only, so the metrics need not be public.
    metrics_port: int = Field(0, ge=0, le=65535)
    # Leave the startup heap out of garbage collections (shuttle/heap.py); off only to compare.
    gc_freeze: bool = True
    # The event loop of every process (shuttle/event_loop.py): uvloop when installed (auto),
    # or asyncio's own, e.g. for its debug mode.
    event_loop: str = Field("auto", pattern="^(auto|uvloop|asyncio)$")

    # The standard OpenTelemetry variables; traces leave the process only when an OTLP
    # endpoint or OTEL_TRACES_EXPORTER=otlp is set.
    otel_traces_exporter: str = Field("", validation_alias=AliasChoices("OTEL_TRACES_EXPORTER"))
    otel_exporter_otlp_endpoint: str = Field(
        "", validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    otel_service_name: str = Field("", validation_alias=AliasChoices("OTEL_SERVICE_NAME"))
    # Set: the SDK's sampler of that name replaces Shuttle's (see shuttle/telemetry.py).
    otel_traces_sampler: str = Field("", validation_alias=AliasChoices("OTEL_TRACES_SAMPLER"))

    # Tool host: hooks, approvals, workspaces, sandboxes, remote providers (docs/tools.md).
    tool_hooks_file: Path | None = None
    approval_timeout_seconds: float = Field(1800.0, gt=0)
    # How long the tools service keeps a call's ledger row (its recorded outcome).
    tool_ledger_retention_hours: float = Field(168.0, gt=0)
    tool_max_observation_chars: int = Field(20_000, ge=100)
    tool_workspace_dir: Path | None = None
    tool_workspace_quota_bytes: int = Field(50 * 1024 * 1024, ge=0)
    http_allow_hosts: list[str] = Field(default_factory=list)
    http_max_response_bytes: int = Field(2 * 1024 * 1024, ge=1)
    python_exec_enabled: bool = False
    python_exec_timeout_seconds: float = Field(20.0, gt=0)
    python_exec_memory_mb: int = Field(512, ge=64)
    python_exec_interpreter: str = ""
    # bubblewrap, which runs each python_exec snippet in a container of its own; with
    # python_exec enabled the tools service does not start without a working one.
    python_exec_bwrap: str = "/usr/bin/bwrap"
    tool_providers: dict[str, str] = Field(default_factory=dict)
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)

    log_level: str = "INFO"
    log_format: str = Field("json", pattern="^(json|text)$")
    shutdown_grace_seconds: float = Field(10.0, ge=0)
    # Every executor replica claims, this often, the runs whose lease lapsed or was handed
    # over (SIGTERM), and goes on with each from its log; a run taken over more than
    # run_max_takeovers times is failed as EXECUTOR_LOST instead.
    run_takeover_poll_seconds: float = Field(1.0, gt=0)
    run_max_takeovers: int = Field(3, ge=0)

    @field_validator("events_addr", "tools_addr", "planner_addr", "executor_addr")
    @classmethod
    def _target_parses(cls, value: str) -> str:
        if value:
            client_target(value)  # load_settings names the variable
        return value

    @field_validator("rate_limit")
    @classmethod
    def _rate_limit_parses(cls, value: str) -> str:
        from limits import parse

        try:
            parse(value)
        except ValueError:
            raise ValueError("expected a rate such as '600/minute' or '10 per second'") from None
        return value

    def grpc_bind(self, service: str) -> tuple[str, int]:
        return getattr(self, f"{service}_host"), getattr(self, f"{service}_port")

    def grpc_target(self, service: str) -> str:
        explicit: str = getattr(self, f"{service}_addr")
        if explicit:
            return client_target(explicit, f"SHUTTLE_{service.upper()}_ADDR")
        host, port = self.grpc_bind(service)
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"{host}:{port}"

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.data_dir / 'shuttle.db'}"

    @property
    def exports_traces(self) -> bool:
        if self.otel_traces_exporter in ("none", "console"):
            return False
        return self.otel_traces_exporter == "otlp" or bool(self.otel_exporter_otlp_endpoint)

    @property
    def cors_origin_list(self) -> list[str]:
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def gateway_base_url(self) -> str:
        if self.gateway_url:
            return self.gateway_url.rstrip("/")
        host = self.gateway_host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://{host}:{self.gateway_port}"

    @property
    def workspace_root(self) -> Path:
        return self.tool_workspace_dir or self.data_dir / "workspaces"

    @property
    def uses_demo_model(self) -> bool:
        return not (self.models_file or self.openai_base_url or self.openai_api_key)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings() -> Settings:
    """Read the environment once; a bad value raises SettingsError naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            variable = field if field.isupper() else f"SHUTTLE_{field.upper()}"
            problems.append(f"{variable}: {err['msg']} (got {err.get('input')!r})")
        raise SettingsError("invalid configuration: " + "; ".join(problems)) from None


def process_environment() -> Mapping[str, str]:
    """The process environment, for the secrets a models file names by variable."""
    return os.environ


def child_environment(overrides: dict[str, str]) -> dict[str, str]:
    """This process's environment plus `overrides`, for the service processes it starts."""
    return {**os.environ, **overrides}
