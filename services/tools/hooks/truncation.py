"""Result truncation: caps the observation the model sees; the full output stays recorded."""

from __future__ import annotations

from dataclasses import dataclass

from services.tools.hooks.base import CallRecord, Hook, HookContext, PostResult
from services.tools.output import truncate


@dataclass(kw_only=True)
class TruncationHook(Hook):
    name: str = "truncation"
    # Advisory: a failure leaves the observation as it was, still bounded by the host's cap.
    fail_closed: bool = False
    priority: int = 900
    max_chars: int = 20_000

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ValueError(f"hook {self.name!r}: max_chars must be >= 1")

    async def post(self, ctx: HookContext, record: CallRecord) -> PostResult | None:
        text, cut = truncate(record.observation, self.max_chars)
        return PostResult(observation=text, truncated=True) if cut else None
