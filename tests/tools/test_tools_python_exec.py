"""python_exec in its bubblewrap container: each test an attack the container must refuse,
with the audit hook switched off by the snippet itself (or left out), on the event loop the
services run (uvloop) and on asyncio's."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from services.tools.builtins import BuiltinConfig, default_tools
from services.tools.builtins.sandbox import Sandbox, SandboxLimits
from services.tools.builtins.syscall_filter import UnsupportedArchitecture, build_filter
from services.tools.workspace import Workspaces
from tests.tools.sandbox_support import BARE, DISARM, Runs, on_loop, processes_mounting

pytestmark = pytest.mark.sandbox
LOOPS = ["uvloop", "asyncio"]


def test_off_unless_a_container_is_given(sandbox: Sandbox, tmp_path: Path) -> None:
    workspaces = Workspaces(tmp_path, 1000)
    assert "python_exec" not in [t.spec.name for t in default_tools(BuiltinConfig())]
    names = [t.spec.name for t in default_tools(BuiltinConfig(workspaces=workspaces))]
    assert "python_exec" not in names
    enabled = BuiltinConfig(workspaces=workspaces, python_sandbox=sandbox)
    assert "python_exec" in [t.spec.name for t in default_tools(enabled)]


@pytest.mark.parametrize("loop", LOOPS)
def test_output_and_workspace_files_shared_with_file_ops_of_the_same_run(
    loop: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    runs = Runs(sandbox, tmp_path / "ws")

    async def scenario() -> None:
        wrote = await runs.python(
            "import os\nopen('notes.txt', 'w').write('from python')\nprint(6 * 7, os.getcwd())"
        )
        assert wrote.ok, wrote.observation
        assert wrote.observation.split() == ["42", "/workspace"]
        read = await runs.call("file_ops", "wf-a", operation="read", path="notes.txt")
        assert read.ok and read.observation == "from python"
        # Written by file_ops, read by the next snippet of the same run.
        await runs.call("file_ops", "wf-a", operation="write", path="in.txt", content="hi")
        back = await runs.python("print(open('in.txt').read().upper())")
        assert back.observation.strip() == "HI"
        # Another run sees neither, from either tool.
        other = await runs.call("file_ops", "wf-b", operation="exists", path="notes.txt")
        assert other.observation == "no"
        listing = await runs.python("import os\nprint(sorted(os.listdir('.')))", "wf-b")
        assert listing.observation.strip() == "[]"

    on_loop(loop, scenario())


def test_environment_is_empty(sandbox: Sandbox, tmp_path: Path) -> None:
    result = on_loop(
        "uvloop", Runs(sandbox, tmp_path).python("import os\nprint(sorted(os.environ))")
    )
    assert result.observation.strip() == "['PWD']"


def test_rewriting_the_audit_hook_then_writing_outside_fails(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "escaped.txt"
    code = DISARM + (
        "import os\n"
        "for path in ['/escaped.txt', '/tmp/../etc/escaped', '/usr/lib/escaped', "
        f"'../escaped.txt', {str(outside)!r}]:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc.strerror)\n"
        "import ctypes\n"
        "print('hook off')\n"
    )
    result = on_loop("uvloop", Runs(sandbox, tmp_path / "ws").python(code))
    assert result.ok, result.observation
    assert "hook off" in result.observation  # the snippet really did disarm it
    assert "WROTE" not in result.observation
    assert result.observation.count("refused") == 5
    assert not outside.exists()
    assert not (tmp_path / "ws" / "acme" / "escaped.txt").exists()


def test_dir_fd_writes_outside_fail(sandbox: Sandbox, tmp_path: Path) -> None:
    code = (
        "import os\n"
        "for where in ['/', '/usr', '..']:\n"
        "    fd = os.open(where, os.O_RDONLY)\n"
        "    try:\n"
        "        os.open('escaped', os.O_CREAT | os.O_WRONLY, dir_fd=fd)\n"
        "        print('WROTE', where)\n"
        "    except OSError as exc:\n"
        "        print('refused', where, exc.strerror)\n"
    )
    result = on_loop("uvloop", Runs(sandbox, tmp_path / "ws", BARE).python(code))
    assert result.ok, result.observation
    assert "WROTE" not in result.observation
    assert result.observation.count("Read-only file system") == 3


def test_sqlite3_cannot_reach_a_database_outside(sandbox: Sandbox, tmp_path: Path) -> None:
    database = tmp_path / "var" / "shuttle.db"
    database.parent.mkdir()
    database.write_bytes(b"SQLite format 3\x00secret rows")
    code = DISARM + (
        "import sqlite3\n"
        f"for path in [{str(database)!r}, '/usr/evil.db']:\n"
        "    try:\n"
        "        sqlite3.connect(path).execute('create table t (x)')\n"
        "        print('OPENED', path)\n"
        "    except sqlite3.Error as exc:\n"
        "        print('refused', exc)\n"
        "sqlite3.connect('mine.db').execute('create table t (x)')\n"
        "print('own database ok')\n"
    )
    result = on_loop("uvloop", Runs(sandbox, tmp_path / "ws").python(code))
    assert result.ok, result.observation
    assert "OPENED" not in result.observation
    assert result.observation.count("unable to open database file") == 2
    assert "own database ok" in result.observation
    assert database.read_bytes() == b"SQLite format 3\x00secret rows"


def test_another_runs_workspace_cannot_be_read(sandbox: Sandbox, tmp_path: Path) -> None:
    runs = Runs(sandbox, tmp_path / "ws")
    secret = tmp_path / "ws" / "acme" / "wf-a" / "secret.txt"

    async def scenario() -> str:
        await runs.call("file_ops", "wf-a", operation="write", path="secret.txt", content="s3")
        assert secret.read_text() == "s3"
        code = DISARM + (
            "import os\n"
            "print(sorted(os.listdir('/')), sorted(os.listdir('..')))\n"
            f"for path in [{str(secret)!r}, '../wf-a/secret.txt', '/workspace/../wf-a']:\n"
            "    try:\n"
            "        print('READ', open(path).read())\n"
            "    except OSError as exc:\n"
            "        print('refused', exc.strerror)\n"
        )
        outcome = await runs.python(code, "wf-b")
        return outcome.observation

    observation = on_loop("uvloop", scenario())
    assert "READ" not in observation and "s3" not in observation
    assert observation.count("refused") == 3
    assert "'wf-a'" not in observation and "'acme'" not in observation


def test_tcp_to_a_loopback_listener_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = DISARM + (
        "import socket\n"
        f"for family, address in [(socket.AF_INET, ('127.0.0.1', {port})), "
        f"(socket.AF_INET6, ('::1', {port}))]:\n"
        "    try:\n"
        "        socket.socket(family).connect(address)\n"
        "        print('CONNECTED')\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.strerror)\n"
    )
    try:
        result = on_loop("uvloop", Runs(sandbox, tmp_path / "ws").python(code))
        assert result.ok, result.observation
        assert "CONNECTED" not in result.observation
        assert result.observation.count("Address family not supported") == 2
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the listener
    finally:
        listener.close()


def test_fork_bomb_is_bounded_and_the_host_carries_on(sandbox: Sandbox, tmp_path: Path) -> None:
    runs = Runs(sandbox, tmp_path / "ws")
    code = DISARM + (
        "import os\n"
        "made = 0\n"
        "try:\n"
        "    while made < 10_000:\n"
        "        if os.fork() == 0:\n"
        "            while True:\n"
        "                os.fork()\n"
        "        made += 1\n"
        "except OSError as exc:\n"
        "    print('refused after', made, exc.strerror)\n"
    )

    async def scenario() -> tuple[str, str]:
        bomb = await runs.python(code)
        after = await runs.python("print('still here')")
        return bomb.observation, after.observation

    bomb, after = on_loop("uvloop", scenario())
    assert "refused after 0 Operation not permitted" in bomb
    assert after.strip() == "still here"


@pytest.mark.parametrize("loop", LOOPS)
def test_sleeping_past_the_wall_timeout_kills_the_container(
    loop: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=1, audit_guard=False)
    runs = Runs(sandbox, tmp_path / "ws", limits)
    result = on_loop(loop, runs.python("import time\nprint('zz', flush=True)\ntime.sleep(600)"))
    assert result.error
    assert "longer than 1 seconds (SHUTTLE_PYTHON_EXEC_TIMEOUT_SECONDS)" in result.observation
    assert "zz" in result.observation
    assert processes_mounting(tmp_path / "ws" / "acme" / "wf-a") == []


def test_cpu_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    result = on_loop("uvloop", Runs(sandbox, tmp_path, BARE).python("while True:\n    pass"))
    assert result.error
    assert "more than 2 s of CPU time (SHUTTLE_PYTHON_EXEC_TIMEOUT_SECONDS)" in result.observation


def test_allocating_past_the_memory_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))"
    result = on_loop("uvloop", Runs(sandbox, tmp_path, BARE).python(code))
    assert result.error
    assert "ran out of memory (limit 256 MiB, SHUTTLE_PYTHON_EXEC_MEMORY_MB)" in result.observation


def test_writing_past_the_file_size_limit(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(file_bytes=10_000, audit_guard=False)
    code = "f = open('big', 'wb')\nf.write(b'x' * 100_000)\nf.flush()"
    result = on_loop("uvloop", Runs(sandbox, tmp_path / "ws", limits).python(code))
    assert result.error and "larger than the limit of 10,000 bytes" in result.observation
    assert (tmp_path / "ws" / "acme" / "wf-a" / "big").stat().st_size <= 10_000


def test_private_tmp_is_size_limited(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(tmp_bytes=1024 * 1024, file_bytes=50 * 2**20, audit_guard=False)
    code = (
        "try:\n"
        "    open('/tmp/fill', 'wb').write(b'x' * 4 * 2**20)\n"
        "except OSError as exc:\n"
        "    print('refused', exc.strerror)\n"
    )
    result = on_loop("uvloop", Runs(sandbox, tmp_path, limits).python(code))
    assert "refused No space left on device" in result.observation


def test_output_is_capped(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(output_bytes=1000)
    result = on_loop("uvloop", Runs(sandbox, tmp_path, limits).python("print('y' * 100_000)"))
    assert result.ok
    assert result.observation.split("\n")[0] == "y" * 1000
    assert "[output cut at 1,000 bytes]" in result.observation


def test_the_audit_hook_still_refuses_when_left_alone(sandbox: Sandbox, tmp_path: Path) -> None:
    runs = Runs(sandbox, tmp_path)
    for code in ("import socket", "import subprocess", "import os\nos.fork()"):
        result = on_loop("uvloop", runs.python(code))
        assert result.error and "is not allowed in the sandbox" in result.observation, code


def test_a_workspace_over_its_quota_is_named(sandbox: Sandbox, tmp_path: Path) -> None:
    runs = Runs(sandbox, tmp_path)
    code = "open('a', 'wb').write(b'x' * 6 * 2**20)"
    result = on_loop("uvloop", runs.python(code))
    assert result.error
    assert "over its quota of 5,242,880 bytes (SHUTTLE_TOOL_WORKSPACE_QUOTA_BYTES)" in (
        result.observation
    )


def test_calls_leave_no_descriptor_or_container_behind(sandbox: Sandbox, tmp_path: Path) -> None:
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=1, audit_guard=False)
    runs = Runs(sandbox, tmp_path / "ws", limits)

    async def scenario() -> tuple[int, int, list[str]]:
        before = len(os.listdir("/proc/self/fd"))
        codes = ["print(1)", "import time\ntime.sleep(60)", "raise SystemExit(3)", "print(2)"]
        outcomes = await asyncio.gather(*(runs.python(code) for code in codes))
        return before, len(os.listdir("/proc/self/fd")), [o.observation for o in outcomes]

    before, after, observations = on_loop("uvloop", scenario())
    assert observations[0].strip() == "1" and observations[3].strip() == "2"
    assert "longer than 1 seconds" in observations[1]
    assert "exit status 3" in observations[2]
    assert after == before
    assert processes_mounting(tmp_path / "ws" / "acme" / "wf-a") == []


def test_the_syscall_filter_refuses_kernel_surfaces(sandbox: Sandbox, tmp_path: Path) -> None:
    # Each call through libc with the audit hook left out: only the filter answers. The
    # numbers are x86_64's and aarch64's, chosen by the machine the container runs on.
    code = (
        "import ctypes, os, platform\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "x86 = platform.machine() == 'x86_64'\n"
        "calls = {'ptrace': (101, 117), 'mount': (165, 40), 'unshare': (272, 97),\n"
        "         'setns': (308, 268), 'keyctl': (250, 219), 'bpf': (321, 280),\n"
        "         'perf_event_open': (298, 241), 'io_uring_setup': (425, 425)}\n"
        "for name, numbers in calls.items():\n"
        "    number = numbers[0] if x86 else numbers[1]\n"
        "    result = libc.syscall(number, 0, 0, 0, 0, 0)\n"
        "    print(name, result, os.strerror(ctypes.get_errno()))\n"
        "print('unshare(CLONE_NEWUSER)', libc.unshare(0x10000000), ctypes.get_errno())\n"
    )
    result = on_loop("uvloop", Runs(sandbox, tmp_path, BARE).python(code))
    assert result.ok, result.observation
    lines = result.observation.strip().splitlines()
    assert len(lines) == 9
    assert all(" -1 Operation not permitted" in line for line in lines[:8]), lines
    assert lines[8] == "unshare(CLONE_NEWUSER) -1 1"


def test_the_filter_names_an_unknown_architecture() -> None:
    with pytest.raises(UnsupportedArchitecture, match=r"knows the syscall tables of x86_64"):
        build_filter("sparc64")
