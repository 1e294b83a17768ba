"""The context guard: keeps the conversation inside the model's token budget.

Over budget, the middle of the conversation is replaced by an LLM summary (with a hint for
the situation the agent is in); system messages, pinned messages (the user's query,
interrupts) and the most recent messages stay as they are. If the summary fails or is not
enough, the oldest unpinned messages are dropped and long ones clipped instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from services.executor.engine.conversation import Conversation, Entry, Layout, layout
from services.executor.engine.tokens import estimate_entries, estimate_tools
from shuttle.llm.protocol import LLM, ChatResult, LLMError, Message, ToolSchema

COMPACT_PROMPT = (
    "You compress the working history of an AI agent so that it can continue its task with "
    "less context. Write a concise summary of the messages you are given: what was tried, "
    "what each tool returned (keep exact facts, numbers, names and identifiers), what failed "
    "and why, and what remains to be done. Write only the summary."
)
SUMMARY_PREFIX = "[Summary of earlier steps]\n"
CLIPPED_CONTENT_CHARS = 2_000

Announce = Callable[[Sequence[Message]], Awaitable[None]]
"""Told the summary call's messages before it is made (the run logs its LLM_PROMPT)."""


@dataclass(frozen=True)
class Situation:
    json_mode: bool = False
    tool_calls: int = 0
    interrupted: bool = False


def compaction_hint(situation: Situation) -> str:
    """What the summary must keep, given where the agent is."""
    hints = []
    if situation.tool_calls:
        hints.append(
            "The agent is in the middle of a tool-using task: keep its most recent chain of "
            "reasoning and the results it is building on."
        )
    else:
        hints.append("The agent has not used tools yet: keep the user's requirements.")
    if situation.interrupted:
        hints.append("The user sent follow-up messages: keep what they asked for.")
    if situation.json_mode:
        hints.append("Do not write JSON actions; the agent continues in its own format.")
    return " ".join(hints)


@dataclass(frozen=True)
class Compaction:
    method: str
    """"summary" or "truncate"."""
    original_messages: int
    kept_messages: int
    tokens_before: int
    tokens_after: int
    entries: Layout
    """The compacted conversation against the one before (see conversation.layout)."""
    summary_call: ChatResult | None = None


class ContextGuard:
    def __init__(self, llm: LLM, budget_tokens: int, keep_recent: int) -> None:
        self._llm = llm
        self._budget = budget_tokens
        self._keep_recent = keep_recent
        self._tools: Sequence[ToolSchema] = ()
        self._tool_tokens = 0

    async def fit(
        self,
        conversation: Conversation,
        tools: Sequence[ToolSchema],
        situation: Situation,
        announce: Announce | None = None,
    ) -> Compaction | None:
        """Compact `conversation` in place when over budget; what was done, or None."""
        tool_tokens = self._tokens_of(tools)
        before = estimate_entries(conversation.entries, tool_tokens)
        if before <= self._budget:
            return None
        original = len(conversation)
        head, middle, tail = self._split(conversation.entries)
        pinned = [e for e in middle if e.pinned]
        dropped = [e for e in middle if not e.pinned]
        summary_call = await self._summarise(dropped, situation, announce) if dropped else None
        method = "truncate"
        entries = [*head, *pinned, *tail]
        if summary_call is not None and summary_call.content.strip():
            summary = Entry({"role": "user", "content": SUMMARY_PREFIX + summary_call.content})
            candidate = [*head, *_summarised(middle, summary), *tail]
            if estimate_entries(candidate, tool_tokens) <= self._budget:
                entries, method = candidate, "summary"
        if method == "truncate":
            entries = self._truncate(entries, tool_tokens)
        described = layout(conversation.entries, entries)
        conversation.replace(entries)
        return Compaction(
            method=method,
            original_messages=original,
            kept_messages=len(entries),
            tokens_before=before,
            tokens_after=estimate_entries(conversation.entries, tool_tokens),
            entries=described,
            summary_call=summary_call,
        )

    def _split(self, entries: list[Entry]) -> tuple[list[Entry], list[Entry], list[Entry]]:
        """(leading system messages, middle, recent messages); the recent part never starts
        with `tool` messages cut off from the assistant message that asked for them."""
        head_end = 0
        while head_end < len(entries) and entries[head_end].message.get("role") == "system":
            head_end += 1
        tail_start = max(head_end, len(entries) - self._keep_recent)
        while tail_start > head_end and entries[tail_start].message.get("role") == "tool":
            tail_start -= 1
        return entries[:head_end], entries[head_end:tail_start], entries[tail_start:]

    async def _summarise(
        self, dropped: list[Entry], situation: Situation, announce: Announce | None
    ) -> ChatResult | None:
        transcript = "\n\n".join(_render(e.message) for e in dropped)
        messages: list[Message] = [
            {"role": "system", "content": f"{COMPACT_PROMPT}\n\n{compaction_hint(situation)}"},
            {"role": "user", "content": transcript},
        ]
        if announce is not None:
            await announce(messages)
        try:
            return await self._llm.chat(messages)
        except LLMError:
            return None

    def _tokens_of(self, tools: Sequence[ToolSchema]) -> int:
        # A run offers the same schema list before every call: encode it once per run, not
        # before each call.
        if tools is not self._tools:
            self._tools, self._tool_tokens = tools, estimate_tools(tools)
        return self._tool_tokens

    def _truncate(self, entries: list[Entry], tool_tokens: int) -> list[Entry]:
        """Drop the oldest unpinned, non-system messages (an assistant message with the
        results of its calls), then clip long unpinned contents."""
        kept = list(entries)

        def over() -> bool:
            return estimate_entries(kept, tool_tokens) > self._budget

        while over():
            index = next(
                (
                    i
                    for i, e in enumerate(kept[:-1])
                    if not e.pinned and e.message.get("role") != "system"
                ),
                None,
            )
            if index is None:
                break
            del kept[index]
            # A `tool` message must not outlive the assistant message that asked for it,
            # not even the newest: a conversation holding one is refused (HTTP 400).
            while index < len(kept) and kept[index].message.get("role") == "tool":
                del kept[index]
        if over():
            kept = [_clipped(e) for e in kept]
        return kept


def _summarised(middle: list[Entry], summary: Entry) -> list[Entry]:
    """The pinned entries with the summary where the first summarised one was, so that a
    session's latest turn (pinned) still follows the summary of the turns before it."""
    kept: list[Entry] = []
    for entry in middle:
        if entry.pinned:
            kept.append(entry)
        elif summary not in kept:
            kept.append(summary)
    return kept


def _render(message: Message) -> str:
    role = message.get("role", "?")
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        parts.append(f"(calls {function.get('name')} with {function.get('arguments')})")
    return f"{role}: " + " ".join(p for p in parts if p)


def _clipped(entry: Entry) -> Entry:
    """A long content cut short; system and pinned messages (the user's query, its follow-
    ups) are kept whole."""
    content = entry.message.get("content")
    if entry.pinned or entry.message.get("role") == "system" or not isinstance(content, str):
        return entry
    if len(content) <= CLIPPED_CONTENT_CHARS:
        return entry
    clipped = content[:CLIPPED_CONTENT_CHARS] + " …[clipped]"
    return Entry({**entry.message, "content": clipped}, entry.pinned)
