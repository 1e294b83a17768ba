"""python_exec limits, enforced on real subprocesses."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from services.tools.builtins import BuiltinConfig, default_tools
from services.tools.builtins.python_exec import PythonExec, SandboxLimits
from services.tools.catalog import ToolRegistry
from services.tools.host import ToolHost
from shuttle.tool_calls import ToolCall

LIMITS = SandboxLimits(cpu_seconds=2, memory_bytes=256 * 2**20, wall_seconds=10, processes=16)


async def run(code: str, limits: SandboxLimits = LIMITS) -> Any:
    host = ToolHost(ToolRegistry([PythonExec(limits)]), default_timeout_seconds=60)
    return await host.execute(
        ToolCall(tool_name="python_exec", arguments_json=json.dumps({"code": code}))
    )


def sandbox_processes() -> int:
    """Processes of the sandbox user still alive (only meaningful when we run as root)."""
    found = subprocess.run(["pgrep", "-c", "-u", "nobody"], capture_output=True, text=True)
    return int(found.stdout.strip() or 0)


def test_off_unless_enabled() -> None:
    names = [tool.spec.name for tool in default_tools(BuiltinConfig())]
    assert "python_exec" not in names
    assert "python_exec" in [t.spec.name for t in default_tools(BuiltinConfig(python_exec=True))]


async def test_runs_code_with_an_empty_environment() -> None:
    result = await run(
        "import os, sys\nprint(6 * 7)\nprint(sorted(os.environ))\nprint(sys.flags.isolated)"
    )
    assert result.ok, result.observation
    number, environment, isolated = result.observation.splitlines()
    assert number == "42"
    # Python itself may set LC_CTYPE; nothing of the service's environment gets through.
    assert set(ast.literal_eval(environment)) <= {"LC_CTYPE"}
    assert isolated == "1"


async def test_script_errors_are_reported() -> None:
    result = await run("raise ValueError('nope')")
    assert result.error and "ValueError: nope" in result.observation


async def test_infinite_loop_hits_the_cpu_limit() -> None:
    result = await run("while True:\n    pass")
    assert result.error
    assert "more than 2 s of CPU time" in result.observation


async def test_sleeping_forever_hits_the_wall_timeout() -> None:
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=1)
    result = await run("import time\ntime.sleep(60)", limits)
    assert result.error and "longer than 1 seconds" in result.observation


async def test_memory_bomb_hits_the_memory_limit() -> None:
    result = await run("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))")
    assert result.error and "ran out of memory (limit 256 MiB)" in result.observation


async def test_fork_bomb_is_refused() -> None:
    result = await run("import os\nwhile True:\n    os.fork()")
    assert result.error and "os.fork is not allowed" in result.observation


@pytest.mark.skipif(os.geteuid() != 0, reason="RLIMIT_NPROC binds only the sandbox user")
async def test_fork_bomb_is_contained_by_process_limits_alone() -> None:
    # With the audit-hook layer off, RLIMIT_NPROC (as `nobody`) and the group kill must hold.
    limits = SandboxLimits(cpu_seconds=5, wall_seconds=5, processes=8, audit_guard=False)
    code = (
        "import os, time\n"
        "made = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "        made += 1\n"
        "except OSError as exc:\n"
        "    print('refused after', made, exc.errno)\n"
    )
    result = await run(code, limits)
    assert "refused after" in result.observation
    made = int(result.observation.split("refused after ")[1].split()[0])
    assert made < 8
    # The sleeping children were killed with the group; none outlives the call.
    remaining = sandbox_processes()
    for _ in range(50):
        if remaining == 0:
            break
        await asyncio.sleep(0.1)
        remaining = sandbox_processes()
    assert remaining == 0


async def test_writing_outside_the_temp_dir_is_refused() -> None:
    target = Path(tempfile.gettempdir()) / f"shuttle-escape-{uuid.uuid4().hex}"
    code = f"open({str(target)!r}, 'w').write('x')\n"
    result = await run(code)
    assert result.error and "writing outside the sandbox directory" in result.observation
    assert not target.exists()
    renamed = await run(f"open('a', 'w').write('x')\nimport os\nos.rename('a', {str(target)!r})")
    assert renamed.error and "os.rename outside the sandbox" in renamed.observation
    assert not target.exists()


async def test_writing_inside_the_temp_dir_works_and_is_removed() -> None:
    result = await run("import os\nopen('out.txt', 'w').write('kept')\nprint(os.getcwd())")
    assert result.ok
    workdir = Path(result.observation.strip())
    assert workdir.name.startswith("shuttle-pyexec-")
    assert not await asyncio.to_thread(workdir.exists)


async def test_file_size_limit() -> None:
    limits = SandboxLimits(file_bytes=10_000)
    result = await run("f = open('big', 'wb')\nf.write(b'x' * 100_000)\nf.flush()", limits)
    assert result.error and "larger than 10,000 bytes" in result.observation


async def test_network_and_subprocess_are_refused() -> None:
    for code in ("import socket", "import subprocess", "import ctypes"):
        result = await run(code)
        assert result.error and "is not allowed in the sandbox" in result.observation, code


async def test_output_is_capped() -> None:
    limits = SandboxLimits(output_bytes=1000)
    result = await run("print('y' * 100_000)", limits)
    assert result.ok
    assert result.observation.split("\n")[0] == "y" * 1000
    assert "[output cut at 1,000 bytes]" in result.observation
