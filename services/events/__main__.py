"""``python -m services.events``: the EventService on the embedded defaults or a configured DB."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc

from shuttle.db import create_engine, sqlite_path
from shuttle.envelope import EPHEMERAL_TYPES
from shuttle.grpc_auth import ServerAuth
from shuttle.grpc_server import Cleanup, GrpcService
from shuttle.process import main
from shuttle.settings import Settings

from .grpc_api import EventServiceServicer
from .grpc_registration import add_to_server
from .hot import HotTier, MemoryHotTier
from .leases import LeaseStore
from .log import EventLog
from .migrate import migrate
from .redis_hot import RedisHotTier
from .retention import RetentionTask
from .roles import CALLER_ROLES
from .sole_replica import SoleReplica
from .store import SqlEventStore
from .sweeper import LeaseSweeper
from .wire import SERVICE_NAME

log = logging.getLogger("events")


async def build(settings: Settings) -> GrpcService:
    """Open the database (creating a SQLite file's directory), migrate it, wire the EventLog
    with the Redis hot tier (or the in-process one), start the retention and lease-sweeping
    tasks, and return the unstarted server."""
    auth = ServerAuth.from_settings(settings)
    url = settings.sqlalchemy_url
    database_file = sqlite_path(url)
    if database_file is not None:
        Path(database_file).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    await migrate(engine)
    ephemeral = EPHEMERAL_TYPES
    if settings.events_durable_llm_prompt:
        ephemeral = ephemeral - {"LLM_PROMPT"}
    store = SqlEventStore(
        engine, ephemeral_types=ephemeral, tenant_max_runs=settings.tenant_max_runs
    )
    cleanups: list[Cleanup] = []
    hot: HotTier
    if settings.redis_url:
        redis_tier = RedisHotTier(
            settings.redis_url,
            prefix=settings.redis_key_prefix,
            max_events=settings.events_hot_max_events,
            max_bytes=settings.events_hot_max_bytes,
            max_workflow_bytes=settings.events_hot_max_workflow_bytes,
            ttl_seconds=settings.events_hot_ttl_seconds,
            max_connections=settings.redis_max_connections,
            seconds_per_reader=settings.events_fanout_seconds_per_reader,
        )
        hot, poll = redis_tier, settings.events_poll_seconds
        cleanups.append(redis_tier.close)
        log.info("hot tier: redis", extra={"prefix": settings.redis_key_prefix})
    else:
        sole = await SoleReplica.claim(engine)
        cleanups.append(sole.release)
        hot = MemoryHotTier(
            max_events=settings.events_hot_max_events,
            max_bytes=settings.events_hot_max_bytes,
            max_workflow_bytes=settings.events_hot_max_workflow_bytes,
            ttl_seconds=settings.events_hot_ttl_seconds,
            seconds_per_reader=settings.events_fanout_seconds_per_reader,
        )
        poll = None
    event_log = EventLog(
        store,
        hot,
        poll_seconds=poll,
        list_max_bytes=settings.events_list_max_bytes,
        max_future_seconds=settings.events_max_future_seconds,
    )
    leases = LeaseStore(engine, writes=store)
    servicer = EventServiceServicer(event_log, leases, records_spans=settings.exports_traces)
    retention = RetentionTask(
        store, settings.events_retention_days, settings.events_purge_interval_seconds
    )
    retention.start()
    sweeper = LeaseSweeper(
        leases,
        event_log,
        settings.events_lease_sweep_seconds,
        orphan_seconds=settings.events_orphan_seconds,
    )
    sweeper.start()

    def register(server: grpc.aio.Server) -> None:
        add_to_server(servicer, server)

    return GrpcService(
        name="events",
        service_names=[SERVICE_NAME],
        register=register,
        on_stop=[sweeper.stop, retention.stop, *cleanups, store.close, engine.dispose],
        auth=auth,
        roles=CALLER_ROLES,
    )


if __name__ == "__main__":
    main("events", build)
