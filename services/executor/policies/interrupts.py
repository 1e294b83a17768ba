"""User follow-ups that arrive mid-run, merged into one pinned message when drained."""

from __future__ import annotations


class InterruptInbox:
    """Filled from the workflow log (and at once by the replica that owns the run); each
    MESSAGE_RECEIVED is taken once, whichever path delivers it first."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, str]] = []
        self._seen: set[int] = set()

    def deliver(self, seq: int, content: str) -> None:
        if seq in self._seen or not content.strip():
            return
        self._seen.add(seq)
        self._pending.append((seq, content))

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
