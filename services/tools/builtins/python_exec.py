"""`python_exec`: run a Python snippet in a bubblewrap container (off unless enabled).

The container (`sandbox.py`) is the boundary: no network, no other process to see, a
read-only root holding only the interpreter, and the run's workspace as the one writable
directory, so files persist across calls of the same run and `file_ops` sees them.
Inside, before the snippet runs, the interpreter sets its resource limits (CPU time,
address space, size of a written file, processes) and installs an audit hook refusing
writes outside the workspace and /tmp, process creation, sockets and ctypes: defence in
depth only, since code in the same interpreter can switch it off.
"""

from __future__ import annotations

import signal
from typing import Any

from services.tools.builtins.sandbox import WORKSPACE_MOUNT, Sandbox, SandboxLimits
from services.tools.catalog import ToolError, ToolOutput, ToolSpec
from services.tools.context import current_call
from services.tools.workspace import Workspaces

MAX_CODE_CHARS = 50_000
# Where each bound comes from, for the messages that name it.
CPU_SETTING = "SHUTTLE_PYTHON_EXEC_TIMEOUT_SECONDS"
MEMORY_SETTING = "SHUTTLE_PYTHON_EXEC_MEMORY_MB"
QUOTA_SETTING = "SHUTTLE_TOOL_WORKSPACE_QUOTA_BYTES"

# Runs first in the container: limits, then the snippet from stdin. Free of imports beyond
# os, sys and resource.
_LIMITS = r"""
import os, resource, sys
for _which, _value in ((resource.RLIMIT_CPU, {cpu}), (resource.RLIMIT_AS, {memory}),
        (resource.RLIMIT_FSIZE, {file}), (resource.RLIMIT_NPROC, {processes}),
        (resource.RLIMIT_CORE, 0)):
    _hard = resource.getrlimit(_which)[1]
    if _hard != resource.RLIM_INFINITY:
        _value = min(_value, _hard)
    resource.setrlimit(_which, (_value, _value))
_source = sys.stdin.buffer.read()
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
"""
_GUARD = r"""
_roots = (os.path.realpath(os.getcwd()), "/tmp")
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
    return any(full == root or full.startswith(root + os.sep) for root in _roots)

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
                f"python_exec: writing outside the workspace is not allowed: {path}")
    elif event in _PATH_EVENTS:
        for arg in args[:2]:
            if isinstance(arg, (str, bytes, os.PathLike)) and not _inside(arg):
                raise PermissionError(f"python_exec: {event} outside the workspace is not allowed")

sys.addaudithook(_hook)
del _hook
"""
_RUN = r"""
exec(compile(_source, "main.py", "exec"), {"__name__": "__main__"})
"""


def bootstrap(limits: SandboxLimits) -> str:
    """The `-c` program the container's interpreter runs."""
    head = _LIMITS.format(
        cpu=limits.cpu_seconds,
        memory=limits.memory_bytes,
        file=limits.file_bytes,
        processes=limits.processes,
    )
    return head + (_GUARD if limits.audit_guard else "") + _RUN


class PythonExec:
    spec = ToolSpec(
        name="python_exec",
        description=(
            "Run a short Python 3 script and return its output (stdout and stderr). Standard "
            "library only, no network, no subprocesses. The working directory is this task's "
            "workspace (the files file_ops reads and writes), kept between calls; /tmp is "
            "scratch space. Print what you want to see."
        ),
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string", "maxLength": MAX_CODE_CHARS}},
            "required": ["code"],
            "additionalProperties": False,
        },
        category="code",
    )

    def __init__(
        self, sandbox: Sandbox, workspaces: Workspaces, limits: SandboxLimits | None = None
    ) -> None:
        self._sandbox = sandbox
        self._workspaces = workspaces
        self.limits = limits or SandboxLimits()

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        limits = self.limits
        workspace = self._workspaces.for_call(current_call())
        workspace.root.mkdir(parents=True, exist_ok=True)
        self._check_quota(workspace.used_bytes(), workspace.quota_bytes, "holds")
        finished = await self._sandbox.run(
            ["-I", "-S", "-B", "-X", "utf8", "-c", bootstrap(limits)],
            args["code"].encode("utf-8", errors="surrogatepass"),
            workspace.root,
            limits,
        )
        text = finished.output.decode("utf-8", errors="replace")
        if finished.cut:
            text += f"\n…[output cut at {limits.output_bytes:,} bytes]"
        if finished.timed_out:
            raise ToolError(
                f"python_exec: the script ran longer than {limits.wall_seconds:g} seconds "
                f"({CPU_SETTING}) and was stopped; its output so far:\n{text}"
            )
        self._check_quota(workspace.used_bytes(), workspace.quota_bytes, "now holds")
        return ToolOutput(text=self._describe(finished.status, text, limits))

    @staticmethod
    def _check_quota(used: int, quota: int, holds: str) -> None:
        if used > quota:
            raise ToolError(
                f"python_exec: the workspace ({WORKSPACE_MOUNT}) {holds} {used:,} bytes, over "
                f"its quota of {quota:,} bytes ({QUOTA_SETTING}); delete files before "
                "writing more"
            )

    @staticmethod
    def _describe(status: int, text: str, limits: SandboxLimits) -> str:
        if status == 0:
            return text or "(no output)"
        killed_by = status - 128 if status > 128 else 0
        if killed_by in (signal.SIGXCPU, signal.SIGKILL):
            why = f"it used more than {limits.cpu_seconds} s of CPU time ({CPU_SETTING})"
        elif killed_by == signal.SIGXFSZ:
            why = f"it wrote a file larger than the limit of {limits.file_bytes:,} bytes"
        elif killed_by == signal.SIGSYS:
            why = "it made a system call the sandbox forbids"
        elif killed_by:
            why = f"it was killed by signal {killed_by}"
        else:
            why = f"exit status {status}"
        if "File too large" in text:
            why += f"; it wrote a file larger than the limit of {limits.file_bytes:,} bytes"
        if "MemoryError" in text:
            why += (
                f"; it ran out of memory (limit {limits.memory_bytes // 2**20} MiB, "
                f"{MEMORY_SETTING})"
            )
        raise ToolError(f"python_exec: the script failed ({why}):\n{text}")
