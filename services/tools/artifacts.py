"""HTML and markdown outputs become artifacts: stored whole, shown to the model as a note.

Models tend to paste a large HTML blob back into their answer; a short note stops that,
while the content stays in the workflow's workspace (readable with file_ops) under the
artifact's URI.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from services.tools.catalog import ToolOutput
from services.tools.context import CallInfo, safe_segment
from services.tools.workspace import Workspaces
from shuttle.tool_calls import Artifact, artifact_name_ok

ARTIFACT_TYPES = {"text/html": ".html", "text/markdown": ".md"}
ARTIFACT_DIR = "artifacts"
_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]")
CHUNK_BYTES = 64 * 1024


class ArtifactNotFound(Exception):
    """No artifact of that name in the workflow's workspace."""


class ArtifactTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def is_artifact(output: ToolOutput) -> bool:
    return output.content_type.split(";")[0].strip().lower() in ARTIFACT_TYPES


class ArtifactStore:
    def __init__(self, workspaces: Workspaces) -> None:
        self._workspaces = workspaces

    def read(
        self, tenant_id: str, workflow_id: str, name: str, max_bytes: int = 0
    ) -> tuple[Artifact, Iterator[bytes]]:
        """The artifact and its content in chunks; raises ArtifactNotFound (for a name
        that `artifact_name_ok` refuses too) and ArtifactTooLarge."""
        if not artifact_name_ok(name):
            raise ArtifactNotFound(name)
        workspace = self._workspaces.for_call(
            CallInfo(tool_name="", tenant_id=tenant_id, workflow_id=workflow_id)
        )
        path = workspace.root / ARTIFACT_DIR / name
        try:
            # O_NOFOLLOW: a symlink put in the artifacts directory leads nowhere.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            raise ArtifactNotFound(name) from None
        handle = os.fdopen(fd, "rb")
        size = os.fstat(fd).st_size
        if max_bytes and size > max_bytes:
            handle.close()
            raise ArtifactTooLarge(size)
        suffix = os.path.splitext(name)[1]
        mime = next(
            (t for t, s in ARTIFACT_TYPES.items() if s == suffix), "application/octet-stream"
        )
        artifact = Artifact(name, mime, size, f"workspace://{ARTIFACT_DIR}/{name}")

        def chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK_BYTES):
                    yield chunk

        return artifact, chunks()

    def save(self, call: CallInfo, output: ToolOutput) -> ToolOutput:
        """Store the output; return what the model sees instead, with the artifact attached."""
        mime = output.content_type.split(";")[0].strip().lower()
        suffix = ARTIFACT_TYPES[mime]
        base = output.artifact_name or f"{call.tool_name}-{call.call_id or 'output'}"
        name = safe_segment(_NAME_RE.sub("_", base), "artifact")
        if not name.endswith(suffix):
            name += suffix
        workspace = self._workspaces.for_call(call)
        data = output.text.encode("utf-8")
        path = workspace.resolve(f"{ARTIFACT_DIR}/{name}")
        workspace.write_bytes(path, data)
        artifact = Artifact(
            name=name,
            mime_type=mime,
            size_bytes=len(data),
            uri=f"workspace://{ARTIFACT_DIR}/{name}",
        )
        note = (
            f"[Artifact generated: {name}] The content ({len(output.text):,} characters of "
            f"{mime}) is stored as an artifact and shown to the user as a preview; it is not "
            f"repeated here. Read it with file_ops path '{ARTIFACT_DIR}/{name}' only if you "
            "need its contents."
        )
        return ToolOutput(text=note, artifacts=(*output.artifacts, artifact))
