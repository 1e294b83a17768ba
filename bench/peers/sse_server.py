"""The peer for idle SSE connections: a bare Starlette app whose streams wait and send nothing.

Same server stack as the gateway (uvicorn, sse-starlette's EventSourceResponse with a 15 s
ping) without FastAPI's routing, tenancy or the gRPC stream behind each connection, so
sse_idle can tell what the SSE layer alone costs per connection.

    .venv/bin/python -m bench.peers.sse_server --port PORT
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import uvicorn
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

NEVER = asyncio.Event()


async def idle_stream() -> AsyncIterator[ServerSentEvent]:
    await NEVER.wait()
    yield ServerSentEvent(data="{}")


async def stream(request: Request) -> EventSourceResponse:
    return EventSourceResponse(idle_stream(), ping=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = Starlette(routes=[Route("/sse", stream)])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
