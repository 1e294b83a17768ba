"""The agent's message list, with the messages compaction must keep marked as pinned."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from shuttle.llm.protocol import Message
from shuttle.llm.tokens import estimate_message_tokens


@dataclass(frozen=True)
class Entry:
    message: Message
    """Complete when added, never changed after (a clipped message is a new entry)."""
    pinned: bool = False

    @cached_property
    def tokens(self) -> int:
        """The message's estimated size, counted once: the context guard sums the whole
        conversation before every model call."""
        return estimate_message_tokens((self.message,))


@dataclass
class Conversation:
    entries: list[Entry] = field(default_factory=list)

    def add(self, message: Message, *, pinned: bool = False) -> None:
        self.entries.append(Entry(message, pinned))

    def add_user(self, content: str, *, pinned: bool = False) -> None:
        self.add({"role": "user", "content": content}, pinned=pinned)

    def add_history(self, history: Sequence[Message]) -> None:
        """Earlier turns of a session, before the new query. The latest turn (its user
        message and what follows) is pinned so compaction keeps it verbatim; older turns
        may be summarised."""
        latest = max(
            (i for i, m in enumerate(history) if m.get("role") == "user"), default=len(history)
        )
        for index, message in enumerate(history):
            self.add(message, pinned=index >= latest)

    def replace(self, entries: Iterable[Entry]) -> None:
        self.entries = list(entries)

    @property
    def messages(self) -> list[Message]:
        return [e.message for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)


Layout = list[int | dict[str, Any]]
"""A conversation described against an earlier one: an entry kept is its index there, a new
entry (a summary, a clipped message) is {"message", "pinned"}."""


def layout(before: Sequence[Entry], after: Sequence[Entry]) -> Layout:
    """`after` against `before`, as a compaction reports it on the log."""
    index = {id(entry): i for i, entry in enumerate(before)}
    described: Layout = []
    for entry in after:
        kept = index.get(id(entry))
        described.append(
            kept if kept is not None else {"message": entry.message, "pinned": entry.pinned}
        )
    return described


def relaid(before: Sequence[Entry], described: Layout) -> list[Entry]:
    """The entries `described` against `before` (the inverse of `layout`)."""
    return [
        before[item]
        if isinstance(item, int)
        else Entry(dict(item["message"]), bool(item.get("pinned")))
        for item in described
    ]


def context_note(task_context: Mapping[str, Any]) -> str:
    """The caller's context for the task, as the agent's system prompt ends with it."""
    if not task_context:
        return ""
    text = json.dumps(task_context, ensure_ascii=False, sort_keys=True)
    return f"\n\nContext the caller gave with this task (JSON):\n{text}"
