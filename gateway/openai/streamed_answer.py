"""The answer as an OpenAI stream has passed it on, across lost deltas and a takeover."""

from __future__ import annotations

from typing import Any


class AnswerDiverged(Exception):
    """A restarted answer says something else than the part of it already streamed."""


class StreamedAnswer:
    """The answer as a stream has passed it on. Answer deltas are ephemeral: an events
    service restart, or a reader that fell behind the hot tier, loses some for good. Deltas
    are passed on until one is missing; the completed message then supplies the rest.

    A run taken over mid-answer tells it again from index 0. What was sent cannot be taken
    back, so the new telling is passed on only past what was sent, as long as it repeats
    it; one that says something else raises AnswerDiverged."""

    def __init__(self) -> None:
        self.sent = ""
        self._restarted = False
        self._told = ""
        """The current telling, as far as its deltas came in order."""
        self._deltas = 0
        self._gap = False

    def delta(self, payload: dict[str, Any]) -> str:
        """What to send of a THREAD_MESSAGE_DELTA: nothing from the first gap on."""
        index = payload.get("index")
        if isinstance(index, int) and index != self._deltas:
            self._gap = True
        if self._gap:
            return ""
        self._deltas += 1
        self._told += str(payload.get("delta", ""))
        if self.sent.startswith(self._told):
            return ""  # a new telling, still repeating what was sent
        return self._past_sent(self._told)

    def restart(self) -> None:
        """STATUS_UPDATE{kind: answer_restarted}: deltas from index 0 follow."""
        self._restarted = True
        self._told, self._deltas, self._gap = "", 0, False

    def completed(self, payload: dict[str, Any]) -> str:
        """What to send of THREAD_MESSAGE_COMPLETED: the answer past what was sent. Nothing
        if the sent text is not its start (a synthesis that failed midway is answered with
        the loop's own answer), since what was sent cannot be taken back; after a restart
        that is AnswerDiverged."""
        content = str(payload.get("content", ""))
        if not content.startswith(self.sent) and not self._restarted:
            return ""
        return self._past_sent(content)

    def _past_sent(self, text: str) -> str:
        if not text.startswith(self.sent):
            raise AnswerDiverged
        rest, self.sent = text[len(self.sent) :], text
        return rest
