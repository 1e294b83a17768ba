"""Calls that wait for a saturated server's event loop are served, not cancelled.

The aio server takes calls from gRPC core one at a time, each on a turn of its event loop.
A loop busy with a thousand runs takes a long time per turn, so new calls queue inside core.
By default core cancels a call queued for 30 s, and a random share of new calls once 1,000
are queued (all past 3,000); either way its client sees a bare CANCELLED from a handler that
never ran. Here the loop is held (as a saturated loop would be) while a plain client, whose
calls travel on core's own threads, sends calls to the real server bootstrap.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc

from shuttle.grpc_server import GrpcService

ECHO = "/shuttle.test.Queue/Echo"
CALL_TIMEOUT_SECONDS = 600.0


async def echo(request: bytes, _context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


def register(server: grpc.aio.Server) -> None:
    handler = grpc.method_handlers_generic_handler(
        "shuttle.test.Queue", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    )
    server.add_generic_rpc_handlers((handler,))


def hold_the_event_loop(seconds: float) -> None:
    """What a saturated loop looks like to gRPC core: no turn in which to take a call."""
    time.sleep(seconds)


async def outcomes_of_calls_queued_behind_a_held_loop(
    calls: int, hold_seconds: float
) -> Counter[str]:
    """Send `calls` calls while the server's loop is held; count answers and failures."""
    service = GrpcService(name="queue", service_names=[], register=register)
    port = await service.start("127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        await asyncio.to_thread(grpc.channel_ready_future(channel).result, 60)
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(ECHO)
        pending = [
            (n, call.future(f"call {n}".encode(), timeout=CALL_TIMEOUT_SECONDS))
            for n in range(calls)
        ]
        hold_the_event_loop(hold_seconds)
        outcomes: Counter[str] = Counter()
        for n, future in pending:
            try:
                answer = (await asyncio.to_thread(future.result)).decode()
                outcomes["answered" if answer == f"call {n}" else f"wrong answer {answer}"] += 1
            except grpc.RpcError as exc:
                outcomes[f"{exc.code().name}: {exc.details()}"] += 1
        return outcomes
    finally:
        channel.close()
        await service.stop(grace=1.0)


async def test_calls_queued_longer_than_thirty_seconds_are_answered() -> None:
    # Longer than core's default wait for a queued call (30 s), with room for the calls to
    # reach the server after the hold begins on a busy machine.
    outcomes = await outcomes_of_calls_queued_behind_a_held_loop(calls=20, hold_seconds=40.0)
    assert outcomes == {"answered": 20}


async def test_thousands_of_queued_calls_are_answered() -> None:
    # Past core's default hard limit of queued calls (3,000), beyond which it drops them all.
    outcomes = await outcomes_of_calls_queued_behind_a_held_loop(calls=4_000, hold_seconds=8.0)
    assert outcomes == {"answered": 4_000}
