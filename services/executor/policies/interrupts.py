"""User follow-ups that arrive mid-run, merged into one pinned message when drained."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FollowUps:
    """Follow-ups taken together: the one message they make, and their seqs on the log."""

    text: str
    seqs: tuple[int, ...]


def merged(pending: Sequence[tuple[int, str]]) -> FollowUps:
    """(seq, content) pairs as the one `[USER INTERRUPT]` message the agent is given."""
    ordered = sorted(pending)
    seqs = tuple(seq for seq, _ in ordered)
    if len(ordered) == 1:
        text = f"[USER INTERRUPT] The user added, while you were working: {ordered[0][1]}"
        return FollowUps(text, seqs)
    lines = "\n".join(f"{i}. {content}" for i, (_, content) in enumerate(ordered, 1))
    text = (
        "[USER INTERRUPT] The user sent these follow-up messages while you were working; "
        f"address all of them:\n{lines}"
    )
    return FollowUps(text, seqs)


class InterruptInbox:
    """Filled from the workflow log (and at once by the replica that owns the run); each
    MESSAGE_RECEIVED is taken once, whichever path delivers it first."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, str]] = []
        self._seen: set[int] = set()
        self._received: list[tuple[int, str]] = []
        self._branches: list[InterruptInbox] = []

    def deliver(self, seq: int, content: str) -> None:
        if seq in self._seen or not content.strip():
            return
        self._seen.add(seq)
        self._pending.append((seq, content))
        self._received.append((seq, content))
        for branch in self._branches:
            branch.deliver(seq, content)

    def restore(self, messages: Sequence[tuple[int, str]], taken: Collection[int]) -> None:
        """Follow-ups read back from the log: all received, those in `taken` already given
        to the agent (a run taken over goes on with the rest pending)."""
        for seq, content in messages:
            self.deliver(seq, content)
        self._pending = [(seq, content) for seq, content in self._pending if seq not in taken]

    def branch(self) -> InterruptInbox:
        """An inbox that also gets every later follow-up (one per concurrent agent), so a
        follow-up reaches every agent running when it arrives, not just the first to drain."""
        child = InterruptInbox()
        self._branches.append(child)
        return child

    def release(self, child: InterruptInbox) -> None:
        if child in self._branches:
            self._branches.remove(child)

    @property
    def received(self) -> list[str]:
        """Every follow-up so far, in log order, drained or not."""
        return [content for _, content in sorted(self._received)]

    def received_since(self, seq: int) -> list[tuple[int, str]]:
        """The follow-ups after `seq` on the log, with their seqs, in log order."""
        return [(s, content) for s, content in sorted(self._received) if s > seq]

    def __len__(self) -> int:
        return len(self._pending)

    def drain(self) -> FollowUps | None:
        """The pending follow-ups as one message, or None."""
        if not self._pending:
            return None
        pending, self._pending = self._pending, []
        return merged(pending)
