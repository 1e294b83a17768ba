"""Per-workflow workspaces: a directory per tenant and workflow, with no way out of it.

Paths are resolved (following symlinks) and must stay under the workspace root; the last
component is opened with O_NOFOLLOW so a symlink swapped in after the check is refused too.

Replicas of the tools service may share the root (one volume): everything about a workspace
is on disk, and a write checks the quota and writes under a lock on a file beside the
workspace (`<workflow>+lock`: '+' is in no directory name, see safe_segment), so writes
through several replicas cannot together pass the quota.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from services.tools.catalog import ToolError
from services.tools.context import CallInfo, safe_segment

LOCK_SUFFIX = "+lock"


@dataclass(frozen=True)
class Workspace:
    root: Path
    quota_bytes: int

    def resolve(self, relative: str) -> Path:
        """The absolute path of `relative` inside the workspace; ToolError if it escapes."""
        if "\x00" in relative:
            raise ToolError("file_ops: the path contains a NUL character")
        candidate = Path(relative.strip() or ".")
        if candidate.is_absolute():
            raise ToolError(
                f"file_ops: {relative!r} is an absolute path; use a path relative to the "
                "workspace, e.g. 'notes/todo.txt'"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        root = self.root.resolve()
        resolved = (root / candidate).resolve()
        if resolved != root and not resolved.is_relative_to(root):
            raise ToolError(
                f"file_ops: {relative!r} is outside the workspace; paths must stay inside it "
                "('..' and links that lead out are refused)"
            )
        return resolved

    def display(self, path: Path) -> str:
        root = self.root.resolve()
        return "." if path == root else str(path.relative_to(root))

    def used_bytes(self) -> int:
        total = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
        return total

    def check_quota(self, adding: int, replacing: int = 0) -> None:
        after = self.used_bytes() - replacing + adding
        if after > self.quota_bytes:
            raise ToolError(
                f"file_ops: the workspace quota of {self.quota_bytes:,} bytes would be "
                f"exceeded ({after:,} bytes); delete files or write less"
            )

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held by one writer at a time, in this process or any other on the same root
        (flock, which blocks: call it off the event loop)."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.root.parent / f"{self.root.name}{LOCK_SUFFIX}"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def write_within_quota(
        self, path: Path, data: bytes, *, append: bool = False, max_file_bytes: int
    ) -> None:
        """Write `data` unless the file or the workspace would outgrow its limit, checked
        and written under the workspace's lock."""
        with self.locked():
            existing = path.stat().st_size if path.is_file() else 0
            if (existing if append else 0) + len(data) > max_file_bytes:
                raise ToolError(
                    f"file_ops: files are limited to {max_file_bytes:,} bytes; write less"
                )
            self.check_quota(len(data), replacing=0 if append else existing)
            self.write_bytes(path, data, append=append)

    def write_bytes(self, path: Path, data: bytes, *, append: bool = False) -> None:
        """Write without following a symlink at `path` (O_NOFOLLOW)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise ToolError(
                f"file_ops: cannot write {self.display(path)!r}: {exc.strerror}"
            ) from None
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)

    def read_bytes(self, path: Path, limit: int) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise ToolError(
                f"file_ops: cannot read {self.display(path)!r}: {exc.strerror}"
            ) from None
        with os.fdopen(fd, "rb") as handle:
            return handle.read(limit)


class Workspaces:
    """Where every workflow's workspace lives: <root>/<tenant>/<workflow>."""

    def __init__(self, root: Path, quota_bytes: int) -> None:
        self._root = root
        self._quota = quota_bytes

    def for_call(self, call: CallInfo) -> Workspace:
        tenant = safe_segment(call.tenant_id, "_default")
        workflow = safe_segment(call.workflow_id, "_adhoc")
        return Workspace(self._root / tenant / workflow, self._quota)

    def remove(self, tenant_id: str, workflow_id: str) -> bool:
        """Delete a workflow's workspace with everything in it; False when it had none."""
        tenant = safe_segment(tenant_id, "_default")
        path = self._root / tenant / safe_segment(workflow_id, "_adhoc")
        if not path.is_dir() or path.is_symlink():
            return False
        shutil.rmtree(path)
        with contextlib.suppress(OSError):
            path.with_name(path.name + LOCK_SUFFIX).unlink()
        with contextlib.suppress(OSError):
            (self._root / tenant).rmdir()  # only when the tenant has no workspace left
        return True
