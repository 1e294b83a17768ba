"""``python -m services.events``: the EventService on the embedded defaults or a configured DB."""

from __future__ import annotations

from pathlib import Path

import grpc

from shuttle.grpc_server import GrpcService
from shuttle.process import main
from shuttle.settings import Settings
from shuttle.v1 import events_pb2_grpc

from .db import create_engine, sqlite_path
from .grpc_api import SERVICE_NAME, EventServiceServicer
from .hot import MemoryHotTier
from .log import EventLog
from .models import create_schema
from .store import SqlEventStore


async def build(settings: Settings) -> GrpcService:
    """Open the database (creating a SQLite file's directory and the tables), wire the
    EventLog with the in-process hot tier, and return the unstarted server."""
    url = settings.sqlalchemy_url
    database_file = sqlite_path(url)
    if database_file is not None:
        Path(database_file).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    await create_schema(engine)
    servicer = EventServiceServicer(EventLog(SqlEventStore(engine), MemoryHotTier()))

    def register(server: grpc.aio.Server) -> None:
        events_pb2_grpc.add_EventServiceServicer_to_server(servicer, server)

    return GrpcService(
        name="events",
        service_names=[SERVICE_NAME],
        register=register,
        on_stop=[engine.dispose],
    )


if __name__ == "__main__":
    main("events", build)
