"""`python -m services.tools`: serve shuttle.v1.ToolService (default 127.0.0.1:50052)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc
from sqlalchemy.engine import make_url

from services.tools.approval_flow import ApprovalService
from services.tools.approvals import ApprovalStore
from services.tools.artifacts import ArtifactStore
from services.tools.buckets import MemoryBuckets, RedisBuckets, TokenBuckets
from services.tools.builtins import BuiltinConfig, default_tools
from services.tools.builtins.sandbox import Sandbox, SandboxLimits, SandboxUnavailable
from services.tools.catalog import ToolRegistry
from services.tools.cleanup import WorkflowDataCleaner
from services.tools.db import create_schema
from services.tools.event_log import GrpcWorkflowLog
from services.tools.grpc_api import CALLER_ROLES, SERVICE_NAME, ToolServiceServicer
from services.tools.hooks.config import HooksConfigError, build_chain, load_hooks_config
from services.tools.host import ToolHost
from services.tools.ledger import LedgerRetention
from services.tools.ledger_storage import open_ledger
from services.tools.netguard import AddressPolicy
from services.tools.providers.loader import load_providers
from services.tools.recorded import RecordedCalls
from services.tools.workspace import Workspaces
from shuttle.db import create_engine
from shuttle.events_client import EventsClient
from shuttle.grpc_auth import NO_SERVER_AUTH, TOOLS, ChannelAuth, ServerAuth
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import Cleanup, GrpcService
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.sql_transactions import writes_for
from shuttle.v1 import tools_pb2_grpc


def service_for(
    host: ToolHost,
    approvals: ApprovalService | None = None,
    on_stop: Sequence[Cleanup] = (),
    cleaner: WorkflowDataCleaner | None = None,
    auth: ServerAuth = NO_SERVER_AUTH,
    recorded: RecordedCalls | None = None,
) -> GrpcService:
    """A GrpcService (with health and reflection) serving ToolService over `host`; calls
    go through `recorded` (the ledger) when given."""
    servicer = ToolServiceServicer(host, approvals, cleaner, recorded)

    def register(server: grpc.aio.Server) -> None:
        tools_pb2_grpc.add_ToolServiceServicer_to_server(servicer, server)

    return GrpcService(
        name="tools",
        service_names=[SERVICE_NAME],
        register=register,
        on_stop=tuple(on_stop),
        auth=auth,
        roles=CALLER_ROLES,
    )


def builtin_config(settings: Settings, python_sandbox: Sandbox | None = None) -> BuiltinConfig:
    return BuiltinConfig(
        workspaces=Workspaces(settings.workspace_root, settings.tool_workspace_quota_bytes),
        http_policy=AddressPolicy.from_list(settings.http_allow_hosts),
        http_max_bytes=settings.http_max_response_bytes,
        http_timeout_seconds=settings.tool_timeout_seconds,
        python_sandbox=python_sandbox,
        python_limits=SandboxLimits(
            cpu_seconds=max(1, int(settings.python_exec_timeout_seconds)),
            memory_bytes=settings.python_exec_memory_mb * 1024 * 1024,
            wall_seconds=settings.python_exec_timeout_seconds,
        ),
    )


async def python_sandbox(settings: Settings) -> Sandbox | None:
    """python_exec's container when enabled, proven by starting one; never a weaker mode."""
    if not settings.python_exec_enabled:
        return None
    try:
        return await Sandbox.prepare(settings.python_exec_bwrap, settings.python_exec_interpreter)
    except SandboxUnavailable as exc:
        raise SystemExit(f"shuttle tools: SHUTTLE_PYTHON_EXEC_ENABLED is on, but {exc}") from None


def _buckets(settings: Settings) -> TokenBuckets:
    if not settings.redis_url:
        return MemoryBuckets()
    import redis.asyncio

    return RedisBuckets(redis.asyncio.from_url(settings.redis_url))


async def build(settings: Settings) -> GrpcService:
    """The tools service as configured: built-ins and providers behind the hook chain."""
    auth = ServerAuth.from_settings(settings)
    # First, so a host that cannot run python_exec's container stops before anything opens.
    sandbox = await python_sandbox(settings)
    try:
        hooks_config = load_hooks_config(settings.tool_hooks_file)
    except HooksConfigError as exc:
        raise SystemExit(f"shuttle tools: {exc}") from None
    url = settings.sqlalchemy_url
    database = make_url(url).database
    if make_url(url).get_backend_name() == "sqlite" and database not in (None, "", ":memory:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    await create_schema(engine)
    # One writer for the audit rows and the ledger: on a SQLite file, one thread and its
    # connection; on a database server, the engine's pool.
    writes = writes_for(engine)
    events_channel = open_channel(
        settings.grpc_target("events"), ChannelAuth.for_component(settings, TOOLS)
    )
    events_client = EventsClient(events_channel, retry_seconds=settings.events_retry_seconds)
    approvals = ApprovalService(ApprovalStore(engine), GrpcWorkflowLog(events_client))
    buckets = _buckets(settings)
    try:
        chain = build_chain(
            hooks_config,
            audit_writes=writes,
            approvals=approvals,
            buckets=buckets,
            approval_timeout_seconds=settings.approval_timeout_seconds,
            max_observation_chars=settings.tool_max_observation_chars,
        )
    except HooksConfigError as exc:
        raise SystemExit(f"shuttle tools: {exc}") from None
    config = builtin_config(settings, sandbox)
    registry = ToolRegistry(default_tools(config))
    providers = await load_providers(settings, registry)
    assert config.workspaces is not None
    host = ToolHost(
        registry,
        default_timeout_seconds=settings.tool_timeout_seconds,
        hooks=chain,
        artifacts=ArtifactStore(config.workspaces),
    )

    ledger, close_ledger = await open_ledger(engine, writes)
    recorded = RecordedCalls(host, ledger)
    retention = LedgerRetention(ledger, settings.tool_ledger_retention_hours)
    retention.start()

    async def finish_calls() -> None:
        await recorded.close(settings.shutdown_grace_seconds)

    async def close_buckets() -> None:
        if isinstance(buckets, RedisBuckets):
            await buckets.close()

    return service_for(
        host,
        approvals,
        # Calls whose callers left finish first, then the hooks drain: their ledger and
        # audit rows are written before the database closes.
        on_stop=[
            finish_calls,
            retention.stop,
            chain.drain,
            close_ledger,
            writes.close,
            providers.close,
            events_channel.close,
            close_buckets,
            engine.dispose,
        ],
        cleaner=WorkflowDataCleaner(config.workspaces, engine, chain, ledger),
        auth=auth,
        recorded=recorded,
    )


if __name__ == "__main__":
    main("tools", build)
