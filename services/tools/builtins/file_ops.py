"""`file_ops`: files in the workflow's own workspace, and nowhere else."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

from services.tools.catalog import ToolError, ToolOutput, ToolSpec
from services.tools.context import current_call
from services.tools.workspace import Workspaces

MAX_READ_BYTES = 1_000_000
MAX_LIST_ENTRIES = 500


class FileOps:
    def __init__(self, workspaces: Workspaces, max_file_bytes: int = 5 * 1024 * 1024) -> None:
        self._workspaces = workspaces
        self._max_file_bytes = max_file_bytes

    spec = ToolSpec(
        name="file_ops",
        description=(
            "Files in this task's private workspace: 'read', 'write', 'append', 'list', "
            "'delete', 'exists'. Paths are relative to the workspace (e.g. 'notes/a.txt')."
        ),
        parameters={
            "type": "object",
            "properties": {
                "operation": {
                    "type": "string",
                    "enum": ["read", "write", "append", "list", "delete", "exists"],
                },
                "path": {"type": "string", "maxLength": 1024},
                "content": {"type": "string", "description": "text to write or append"},
            },
            "required": ["operation"],
            "additionalProperties": False,
        },
        category="files",
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        workspace = self._workspaces.for_call(current_call())
        operation = args["operation"]
        path = workspace.resolve(args.get("path", "."))
        shown = workspace.display(path)
        if operation == "exists":
            return ToolOutput(text="yes" if path.exists() else "no")
        if operation == "list":
            if not path.is_dir():
                raise ToolError(f"file_ops: {shown!r} is not a directory")
            entries = sorted(os.scandir(path), key=lambda entry: entry.name)
            lines = [
                f"{entry.name}/" if entry.is_dir() else f"{entry.name} ({entry.stat().st_size} B)"
                for entry in entries[:MAX_LIST_ENTRIES]
            ]
            more = len(entries) - MAX_LIST_ENTRIES
            if more > 0:
                lines.append(f"… and {more} more")
            return ToolOutput(text="\n".join(lines) or "(empty)")
        if path == workspace.root.resolve():
            raise ToolError("file_ops: give the path of a file")
        if operation == "read":
            if not path.is_file():
                raise ToolError(f"file_ops: {shown!r} does not exist or is not a file")
            data = workspace.read_bytes(path, MAX_READ_BYTES + 1)
            note = ""
            if len(data) > MAX_READ_BYTES:
                data, note = data[:MAX_READ_BYTES], f"\n…[only the first {MAX_READ_BYTES:,} bytes]"
            return ToolOutput(text=data.decode("utf-8", errors="replace") + note)
        if operation == "delete":
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
            else:
                raise ToolError(f"file_ops: {shown!r} does not exist")
            return ToolOutput(text=f"deleted {shown}")
        if "content" not in args:
            raise ToolError(f"file_ops: '{operation}' needs 'content'")
        data = args["content"].encode("utf-8")
        append = operation == "append"
        # In a thread: the workspace's lock may be held by a write through another replica.
        await asyncio.to_thread(
            workspace.write_within_quota,
            path,
            data,
            append=append,
            max_file_bytes=self._max_file_bytes,
        )
        return ToolOutput(text=f"{'appended' if append else 'wrote'} {len(data)} bytes to {shown}")
