"""User follow-ups that arrive mid-run, merged into one pinned message when drained."""

from __future__ import annotations


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

    def __len__(self) -> int:
        return len(self._pending)

    def drain(self) -> str | None:
        """The pending follow-ups as one `[USER INTERRUPT]` message, or None."""
        if not self._pending:
            return None
        pending = sorted(self._pending)
        self._pending.clear()
        if len(pending) == 1:
            return f"[USER INTERRUPT] The user added, while you were working: {pending[0][1]}"
        lines = "\n".join(f"{i}. {content}" for i, (_, content) in enumerate(pending, 1))
        return (
            "[USER INTERRUPT] The user sent these follow-up messages while you were working; "
            f"address all of them:\n{lines}"
        )
