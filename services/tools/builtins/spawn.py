"""One child process started with posix_spawn and watched through a pidfd, on any loop.

Not the event loop's subprocess support: uvloop's forks, and a fork runs the pthread_atfork
handlers gRPC registers, which in a serving process crash the child now and then before it
reaches exec. posix_spawn runs no fork handlers, and it is the same on uvloop and asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# The descriptor number the child finds `pass_data` at.
PASSED_FD = 3
# After the child is killed, how long the rest of its output may take to drain.
READ_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class Exit:
    """How the child ended: its exit status, or 128 + N when signal N ended it."""

    status: int
    output: bytes
    cut: bool
    timed_out: bool


def _status(wait_status: int) -> int:
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.waitstatus_to_exitcode(wait_status)


async def _ready(fd: int, writing: bool = False) -> None:
    """Wait until `fd` is readable (or writable); a pidfd turns readable when its process ends."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    (loop.add_writer if writing else loop.add_reader)(fd, ready)
    try:
        await done
    finally:
        (loop.remove_writer if writing else loop.remove_reader)(fd)


async def _read_capped(fd: int, limit: int) -> tuple[bytes, bool]:
    """Everything the pipe `fd` yields until its writers are gone, kept up to `limit` bytes."""
    data = bytearray()
    cut = False
    try:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                await _ready(fd)
                continue
            if not chunk:
                return bytes(data), cut
            if len(data) + len(chunk) > limit:
                cut = True
            # Keep draining past the limit so the child never blocks on a full pipe.
            data.extend(chunk[: max(0, limit - len(data))])
    finally:
        os.close(fd)


async def _feed(fd: int, data: bytes) -> None:
    """Write `data` to the pipe `fd`; ends once written or once its reader is gone."""
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                await _ready(fd, writing=True)
            except (BrokenPipeError, ConnectionResetError):
                return  # the child did not read it all: it failed early or did not need it
    finally:
        os.close(fd)


def _start(argv: Sequence[str], pass_data: bytes) -> tuple[int, int, int]:
    """Spawn `argv`; its pid, the write end of its stdin and the read end of its output."""
    with open_pipe() as (pass_read, pass_write):
        os.write(pass_write, pass_data)  # small (a few hundred bytes): fits the pipe's buffer
        # Above the descriptors the child's dup2s target, so none overwrites another.
        passed = fcntl.fcntl(pass_read, fcntl.F_DUPFD_CLOEXEC, 10)
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        pid = os.posix_spawn(
            argv[0],
            list(argv),
            {},
            file_actions=[
                (os.POSIX_SPAWN_DUP2, in_read, 0),
                (os.POSIX_SPAWN_DUP2, out_write, 1),
                (os.POSIX_SPAWN_DUP2, out_write, 2),
                (os.POSIX_SPAWN_DUP2, passed, PASSED_FD),
            ],
            setsid=True,
        )
    except BaseException:
        os.close(in_write)
        os.close(out_read)
        raise
    finally:
        for fd in (in_read, out_write, passed):
            os.close(fd)
    return pid, in_write, out_read


@contextlib.contextmanager
def open_pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    try:
        yield read, write
    finally:
        os.close(read)
        os.close(write)


async def run_child(
    argv: Sequence[str],
    *,
    stdin: bytes,
    pass_data: bytes,
    output_limit: int,
    wall_seconds: float,
) -> Exit:
    """Run `argv` in a new session with an empty environment, stdout and stderr merged.

    `pass_data` is readable at descriptor PASSED_FD. After `wall_seconds`, or when the
    caller is cancelled, the child's process group is killed.
    """
    pid, in_write, out_read = _start(argv, pass_data)
    for fd in (in_write, out_read):
        os.set_blocking(fd, False)
    pidfd = os.pidfd_open(pid)
    # Neither is cancelled on the way out: once the child's processes are gone, stdin breaks
    # and the output ends, so both finish by themselves and close their pipes.
    feeding = asyncio.ensure_future(_feed(in_write, stdin))
    reading = asyncio.ensure_future(_read_capped(out_read, output_limit))
    timed_out = False
    output, cut = b"", False
    try:
        try:
            async with asyncio.timeout(wall_seconds):
                await _ready(pidfd)
        except TimeoutError:
            timed_out = True
        finally:
            # The child leads its own process group: this takes down whatever it started,
            # even after the child itself has exited.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        done, _ = await asyncio.wait([reading], timeout=READ_GRACE_SECONDS)
        if done:
            output, cut = reading.result()
    finally:
        wait_status = await _reap(pid, pidfd)
    await asyncio.wait([feeding], timeout=READ_GRACE_SECONDS)
    return Exit(
        status=_status(wait_status),
        output=output,
        cut=cut,
        timed_out=timed_out,
    )


async def _reap(pid: int, pidfd: int) -> int:
    """Kill the child if it still runs, and reap it: its wait status."""
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    try:
        await _ready(pidfd)
    except asyncio.CancelledError:
        _reap_later(pid, pidfd)
        raise
    return _collect(pid, pidfd)


def _collect(pid: int, pidfd: int) -> int:
    """The wait status of a child its pidfd reported ended, so this does not block."""
    os.close(pidfd)
    return os.waitpid(pid, 0)[1]


def _reap_later(pid: int, pidfd: int) -> None:
    loop = asyncio.get_running_loop()

    def ended() -> None:
        loop.remove_reader(pidfd)
        _collect(pid, pidfd)

    loop.add_reader(pidfd, ended)
