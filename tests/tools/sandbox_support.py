"""python_exec's container for tests: prepared once, skipped locally without bubblewrap and
failed under CI (CI=true), where .ci/run installs it."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from services.tools.builtins.file_ops import FileOps
from services.tools.builtins.python_exec import PythonExec
from services.tools.builtins.sandbox import (
    WORKSPACE_MOUNT,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
)
from services.tools.catalog import ToolRegistry
from services.tools.host import ToolHost
from services.tools.workspace import Workspaces
from shuttle import event_loop
from shuttle.tool_calls import ToolCall, ToolOutcome

BWRAP = "/usr/bin/bwrap"
LIMITS = SandboxLimits(cpu_seconds=2, memory_bytes=256 * 2**20, wall_seconds=10, processes=16)
# The container alone, without the in-process audit hook: what the boundary must hold.
BARE = SandboxLimits(
    cpu_seconds=2, memory_bytes=256 * 2**20, wall_seconds=10, processes=16, audit_guard=False
)
# What a snippet runs first to switch the audit hook off by rewriting its globals.
DISARM = (
    "import sys\n"
    "_m = sys.modules['__main__']\n"
    "_m._DENY = ('no such event',)\n"
    "_m._DENY_IMPORTS = set()\n"
    "_m._inside = lambda path: True\n"
)

_T = TypeVar("_T")
_prepared: Sandbox | None = None


def unavailable(why: object) -> None:
    message = f"bubblewrap cannot run python_exec's container here ({why}); .ci/run installs it"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def prepared_sandbox() -> Sandbox:
    """One container layout for the whole test session (it depends only on the host)."""
    global _prepared
    if _prepared is None:
        try:
            _prepared = asyncio.run(Sandbox.prepare(BWRAP))
        except SandboxUnavailable as exc:
            unavailable(exc)
    assert _prepared is not None
    return _prepared


def on_loop(loop: str, main: Coroutine[Any, Any, _T]) -> _T:
    """Run `main` on the event loop the services use (uvloop) or asyncio's own."""
    return event_loop.run(main, loop)


class Runs:
    """python_exec and file_ops over one workspace root, called as the tool host calls them."""

    def __init__(self, sandbox: Sandbox, root: Path, limits: SandboxLimits = LIMITS) -> None:
        self.workspaces = Workspaces(root, 5 * 1024 * 1024)
        self.host = ToolHost(
            ToolRegistry([PythonExec(sandbox, self.workspaces, limits), FileOps(self.workspaces)]),
            default_timeout_seconds=60,
        )
        self._calls = 0

    async def call(self, tool: str, workflow: str, **arguments: Any) -> ToolOutcome:
        self._calls += 1
        return await self.host.execute(
            ToolCall(
                tool_name=tool,
                arguments_json=json.dumps(arguments),
                call_id=f"call-{self._calls}",
                workflow_id=workflow,
                tenant_id="acme",
            )
        )

    async def python(self, code: str, workflow: str = "wf-a") -> ToolOutcome:
        return await self.call("python_exec", workflow, code=code)


def processes_mounting(path: Path) -> list[int]:
    """Processes whose mount namespace binds `path` (a container still alive on it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            mounts = Path(f"/proc/{entry}/mountinfo").read_text()
        except OSError:
            continue
        for line in mounts.splitlines():
            fields = line.split()
            # The bind's source shows relative to its file system's root.
            if fields[4] == WORKSPACE_MOUNT and str(path).endswith(fields[3]):
                found.append(int(entry))
                break
    return found
