"""Cycle detection: the same tool with the same arguments, again and again."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field


def call_key(tool_name: str, arguments_json: str) -> str:
    """A hash of the tool and its arguments in canonical form (key order, spacing ignored)."""
    try:
        canonical = json.dumps(json.loads(arguments_json), sort_keys=True, separators=(",", ":"))
    except ValueError:
        canonical = arguments_json.strip()
    return hashlib.sha256(f"{tool_name}\x00{canonical}".encode()).hexdigest()


@dataclass
class CycleDetector:
    """One per run, so the counts start from zero with every run."""

    threshold: int
    counts: Counter[str] = field(default_factory=Counter)

    def observe(self, tool_name: str, arguments_json: str) -> str | None:
        """The warning to inject when this call has now been made `threshold` times or more."""
        if self.threshold <= 0:
            return None
        key = call_key(tool_name, arguments_json)
        self.counts[key] += 1
        count = self.counts[key]
        if count < self.threshold:
            return None
        return (
            f"You have called `{tool_name}` with identical arguments {count} times. Calling it "
            "again will not give you anything new: try a different approach or another tool, "
            "or answer with what you have."
        )

    def warnings(self, tool_name: str, arguments_json: str) -> int:
        """How many warnings this call has had."""
        if self.threshold <= 0:
            return 0
        return max(0, self.counts[call_key(tool_name, arguments_json)] - self.threshold + 1)
