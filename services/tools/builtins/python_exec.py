"""`python_exec`: run a Python snippet in a constrained subprocess (off unless enabled).

Containment, in layers:
- resource limits set in the child before exec: CPU time, address space (memory), size of
  any file written, number of processes;
- when the service runs as root, the child runs as `nobody`, so RLIMIT_NPROC binds
  (it does not bind root) and the file system's permissions apply;
- an empty environment, `python -I -S` (no site, no user paths), a fresh temporary
  directory as the working directory, deleted afterwards;
- an audit hook installed before the snippet runs refuses writes outside that directory,
  process creation (fork, exec, subprocess), sockets and ctypes;
- a wall-clock timeout after which the whole process group is killed, and a kill of the
  group after every run so nothing it started outlives it.

This confines well-meant and careless code; it is not a boundary against a determined
attacker with a kernel exploit. Deployments that run untrusted code should also run the
tools service in a container sandbox (gVisor, Firecracker).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import resource
import shutil
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.tools.catalog import ToolError, ToolOutput, ToolSpec

MAX_CODE_CHARS = 50_000
SANDBOX_USER = "nobody"
# After the process group is killed, how long the rest of its output may take to drain.
READ_GRACE_SECONDS = 2.0

# Runs in the child before the snippet. Kept free of imports beyond sys/os.
_BOOTSTRAP = r"""
import os, sys
_root = os.path.realpath(os.getcwd())
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link",
    "os.chmod", "os.chown", "os.truncate", "os.utime", "os.replace", "shutil.rmtree",
    "shutil.move", "shutil.copyfile", "os.mkfifo", "os.mknod"}
_DENY = ("os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    "subprocess.Popen", "socket.__new__", "socket.connect", "socket.bind", "ctypes.",
    "os.kill", "os.killpg", "os.setuid", "sys.remote_exec")
_DENY_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess", "subprocess", "multiprocessing",
    "_multiprocessing", "socket", "_socket"}

def _inside(path):
    if isinstance(path, int):
        return True
    try:
        full = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return full == _root or full.startswith(_root + os.sep)

def _hook(event, args):
    if event.startswith(_DENY):
        raise PermissionError(f"python_exec: {event} is not allowed in the sandbox")
    if event == "import" and args and str(args[0]).split(".")[0] in _DENY_IMPORTS:
        raise ImportError(f"python_exec: importing {args[0]} is not allowed in the sandbox")
    if event == "open" and len(args) >= 3:
        path, mode, flags = args[0], args[1], args[2]
        writing = (mode is not None and any(c in str(mode) for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE)
        if writing and not _inside(path):
            raise PermissionError(
                f"python_exec: writing outside the sandbox directory is not allowed: {path}")
    elif event in _PATH_EVENTS:
        for arg in args[:2]:
            if isinstance(arg, (str, bytes, os.PathLike)) and not _inside(arg):
                raise PermissionError(
                    f"python_exec: {event} outside the sandbox directory is not allowed")

sys.addaudithook(_hook)
del _hook
"""
_RUN = r"""
_code = open("main.py", encoding="utf-8").read()
exec(compile(_code, "main.py", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 10
    memory_bytes: int = 512 * 1024 * 1024
    file_bytes: int = 10 * 1024 * 1024
    processes: int = 32
    wall_seconds: float = 20.0
    output_bytes: int = 100_000
    # The audit-hook layer; turned off only to test that the other layers hold on their own.
    audit_guard: bool = True


def _sandbox_user() -> tuple[int, int] | None:
    """uid/gid to drop to when running as root; None when not root (limits still apply)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        raise ToolError(f"python_exec: the sandbox user {SANDBOX_USER!r} does not exist") from None
    return entry.pw_uid, entry.pw_gid


def _open_to_others(path: str) -> bool:
    """Whether a user who is neither owner nor group (the sandbox user) can run `path`."""
    current = Path(path)
    if not current.stat().st_mode & stat.S_IXOTH:
        return False
    return all(parent.stat().st_mode & stat.S_IXOTH for parent in current.parents)


def find_interpreter(preferred: str = "") -> str:
    """A Python the sandbox can run: `preferred`, else the base interpreter, else the system's.

    The base interpreter rather than the virtualenv's, so the script does not see Shuttle's
    packages; when the service runs as root the sandbox user must also be able to reach it
    (a per-user install under /root is not).
    """
    base = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    candidates = [preferred] if preferred else [base, "/usr/bin/python3", "/usr/local/bin/python3"]
    dropping = os.geteuid() == 0
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if os.path.isfile(real) and (not dropping or _open_to_others(real)):
            return real
    raise ToolError(
        "python_exec: no Python interpreter the sandbox user can run was found; set "
        "SHUTTLE_PYTHON_EXEC_INTERPRETER"
    )


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    data = bytearray()
    while chunk := await stream.read(65536):
        if len(data) < limit:
            data.extend(chunk[: limit - len(data)])
        elif len(data) >= limit:
            # Keep draining so the child does not block on a full pipe; just stop storing.
            continue
    return bytes(data), len(data) >= limit


async def _exited(pid: int) -> None:
    """Wait until `pid` exits, without reaping it.

    asyncio's Process.wait() also waits for the pipes to close, which a child the script
    forked can hold open forever; a pidfd reports the script's own exit, so its group can
    be killed right then.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already exited and reaped
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class PythonExec:
    spec = ToolSpec(
        name="python_exec",
        description=(
            "Run a short Python 3 script and return its output (stdout and stderr). No network, "
            "no subprocesses, standard library only; files may be written only in its own "
            "temporary directory, which is deleted afterwards. Print what you want to see."
        ),
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string", "maxLength": MAX_CODE_CHARS}},
            "required": ["code"],
            "additionalProperties": False,
        },
        category="code",
    )

    def __init__(self, limits: SandboxLimits | None = None, interpreter: str = "") -> None:
        self.limits = limits or SandboxLimits()
        self._interpreter = interpreter

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        limits = self.limits
        user = _sandbox_user()
        workdir = Path(tempfile.mkdtemp(prefix="shuttle-pyexec-"))
        try:
            (workdir / "main.py").write_text(args["code"], encoding="utf-8")
            if user is not None:
                os.chown(workdir, *user)
                os.chown(workdir / "main.py", *user)
            return await self._execute(workdir, user, limits)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    async def _execute(
        self, workdir: Path, user: tuple[int, int] | None, limits: SandboxLimits
    ) -> ToolOutput:
        def limit_child() -> None:  # runs in the child between fork and exec
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
            resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if user is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
            else:
                # Not root: the count is per user and includes the service itself, so allow
                # no new process at all.
                resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))

        process = await asyncio.create_subprocess_exec(
            find_interpreter(self._interpreter),
            "-I",
            "-S",
            "-B",
            "-c",
            (_BOOTSTRAP if limits.audit_guard else "") + _RUN,
            cwd=workdir,
            env={},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=limit_child,
            user=user[0] if user else None,
            group=user[1] if user else None,
            extra_groups=[] if user else None,
        )
        assert process.stdout is not None
        reader = asyncio.ensure_future(_read_capped(process.stdout, limits.output_bytes))
        timed_out = False
        try:
            async with asyncio.timeout(limits.wall_seconds):
                await _exited(process.pid)
        except TimeoutError:
            timed_out = True
        finally:
            # The child leads its own process group; kill everything it may have left, which
            # also closes the pipe any leftover held open.
            _kill_group(process.pid)
            if process.returncode is None:
                await process.wait()
        try:
            output, cut = await asyncio.wait_for(reader, READ_GRACE_SECONDS)
        except TimeoutError:
            output, cut = b"", False  # something outside the group still holds the pipe
        text = output.decode("utf-8", errors="replace")
        if cut:
            text += f"\n…[output cut at {limits.output_bytes:,} bytes]"
        if timed_out:
            raise ToolError(
                f"python_exec: the script ran longer than {limits.wall_seconds:g} seconds and "
                f"was stopped; its output so far:\n{text}"
            )
        return ToolOutput(text=self._describe(process.returncode or 0, text, limits))

    @staticmethod
    def _describe(code: int, text: str, limits: SandboxLimits) -> str:
        if code == 0:
            return text or "(no output)"
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            why = f"it used more than {limits.cpu_seconds} s of CPU time"
        elif code == -signal.SIGXFSZ:
            why = f"it wrote a file larger than {limits.file_bytes:,} bytes"
        elif code < 0:
            why = f"it was killed by signal {-code}"
        else:
            why = f"exit status {code}"
        if "File too large" in text:
            why += f"; it wrote a file larger than {limits.file_bytes:,} bytes"
        if "MemoryError" in text:
            why += f"; it ran out of memory (limit {limits.memory_bytes // 2**20} MiB)"
        raise ToolError(f"python_exec: the script failed ({why}):\n{text}")
