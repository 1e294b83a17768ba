"""The event loop each process runs on: uvloop where it is installed, else asyncio's own.

Every process spends much of its time in the loop itself (callbacks, futures, the selector;
gRPC's completion queue wakes it through a socket), and uvloop runs that part in C: runs of
five tool rounds cost the services a tenth less CPU on it (`bench.suites.run_cpu`, see
docs/benchmarks.md). Its clock and timers go by milliseconds, so a paced wake-up due in
0.1 ms (shuttle/paced_signal.py) comes at the next millisecond.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from shuttle.settings import SettingsError

_T = TypeVar("_T")
LoopName = Literal["uvloop", "asyncio"]


def loop_name(choice: str) -> LoopName:
    """What `SHUTTLE_EVENT_LOOP` (auto, uvloop or asyncio) comes to on this machine."""
    installed = importlib.util.find_spec("uvloop") is not None
    if choice == "asyncio" or (choice == "auto" and not installed):
        return "asyncio"
    if not installed:
        raise SettingsError(
            "SHUTTLE_EVENT_LOOP=uvloop but uvloop is not installed: "
            "`pip install uvloop`, or set SHUTTLE_EVENT_LOOP to auto or asyncio"
        )
    return "uvloop"


def run(main: Coroutine[Any, Any, _T], choice: str) -> _T:
    """`asyncio.run(main)` on the loop `choice` names."""
    try:
        factory = _factory(loop_name(choice))
    except SettingsError:
        main.close()  # never awaited: close it so Python does not warn about it
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def _factory(name: LoopName) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if name == "asyncio":
        return None  # the Runner's default
    import uvloop

    return uvloop.new_event_loop
