"""Answers to the requests of one bidirectional call, each handled as it arrives.

For AppendStream: a producer's batches for different logs must not wait for each other, so
each is its own task (concurrent appends then share group commits), and its answer is sent
as soon as it is ready, whatever the order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TypeVar

_Request = TypeVar("_Request")
_Answer = TypeVar("_Answer")


async def answered_concurrently(
    requests: AsyncIterable[_Request], answer: Callable[[_Request], Awaitable[_Answer]]
) -> AsyncIterator[_Answer]:
    """`answer(request)` for every request, yielded as each finishes; ends once the requests
    have ended and every answer is out. Leaving early cancels what is still running."""
    answers: asyncio.Queue[_Answer | BaseException | None] = asyncio.Queue()
    running: set[asyncio.Task[None]] = set()

    async def handle(request: _Request) -> None:
        try:
            answers.put_nowait(await answer(request))
        except Exception as failed:  # `answer` reports errors itself; anything else ends the call
            answers.put_nowait(failed)

    async def read() -> None:
        try:
            async for request in requests:
                task = asyncio.create_task(handle(request))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:
                await asyncio.wait(set(running))
        except Exception as failed:  # the caller went away mid-read
            answers.put_nowait(failed)
        finally:
            answers.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await answers.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        reader.cancel()
        for task in (reader, *running):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(reader, *running, return_exceptions=True)
