"""Holds N idle EventService.Stream calls in a bare grpc.aio client and prints what each costs.

sse_idle runs it beside the gateway to tell how much of a gateway SSE connection is its gRPC
stream: the same calls, with no HTTP, no SSE and no FastAPI around them. Prints one JSON line.

    .venv/bin/python -m bench.peers.grpc_stream_holder --target HOST:PORT --workflow ID --count N
        [--token-file PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

import grpc

from bench.support.meters import rss_bytes
from shuttle.grpc_client import tenant_metadata
from shuttle.v1 import common_pb2, events_pb2, events_pb2_grpc

SETTLE_SECONDS = 3.0


async def follow(call: grpc.aio.UnaryStreamCall[Any, common_pb2.Event]) -> None:
    async for _event in call:
        pass


async def main(args: argparse.Namespace) -> None:
    metadata = tenant_metadata(args.tenant)
    if args.token_file is not None:
        metadata += (("authorization", f"Bearer {args.token_file.read_text().strip()}"),)
    async with grpc.aio.insecure_channel(args.target) as channel:
        await channel.channel_ready()
        stub = events_pb2_grpc.EventServiceStub(channel)
        request = events_pb2.StreamRequest(
            workflow_id=args.workflow, tenant_id=args.tenant, from_seq=1
        )
        # One call first, so what every stream shares (the connection, its buffers) is in
        # the baseline.
        first = asyncio.create_task(follow(stub.Stream(request, metadata=metadata)))
        await asyncio.sleep(SETTLE_SECONDS)
        before = rss_bytes(os.getpid())
        calls = [stub.Stream(request, metadata=metadata) for _ in range(args.count)]
        tasks = [asyncio.create_task(follow(call)) for call in calls]
        await asyncio.sleep(SETTLE_SECONDS)  # a window for the calls to open, not a condition
        after = rss_bytes(os.getpid())
        for call in calls:
            call.cancel()
        first.cancel()
        await asyncio.gather(*tasks, first, return_exceptions=True)
    print(json.dumps({"streams": args.count, "per_stream_bytes": (after - before) / args.count}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--workflow", required=True)
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument(
        "--token-file", type=Path, help="a file holding the internal token the events service needs"
    )
    asyncio.run(main(parser.parse_args()))
