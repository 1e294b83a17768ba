"""The saved results of one suite run, by benchmark name."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Results:
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By file stem: `react_overhead`, `events_latency-pg`, ..."""

    @classmethod
    def read(cls, directory: Path) -> Results:
        documents = {}
        for path in sorted(directory.glob("*.json")):
            try:
                document = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} is not valid JSON: {exc}") from exc
            if not isinstance(document, dict) or "figures" not in document:
                raise ValueError(f"{path} is not a benchmark result (no 'figures')")
            documents[path.stem] = document
        return cls(documents)

    def figures(self, name: str) -> dict[str, Any] | None:
        document = self.documents.get(name)
        return None if document is None else dict(document["figures"])

    def settings(self, name: str) -> dict[str, Any]:
        document = self.documents.get(name)
        return {} if document is None else dict(document.get("settings", {}))

    def machines(self) -> list[dict[str, Any]]:
        return [d["machine"] for d in self.documents.values() if "machine" in d]
