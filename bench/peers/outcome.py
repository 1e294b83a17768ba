"""What a persisting peer's run ends with, checked the same way for each of them.

A persisting peer saves every run under a key of its own (LangGraph's thread id, the Agents
SDK's session id) and can read the saved conversation back, in one vocabulary for all:
`user`, `tool_call`, `tool_result`, `answer`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finished:
    key: str
    """The thread or session the run was saved under."""
    answer: str
    tool_results: int
    """Tool results in the run's conversation as the peer returned it."""


def checked(finished: Finished, k: int) -> Finished:
    """The run as returned, or an error if it did not make K tool calls and then answer: a
    peer that stops early would look cheap."""
    if finished.tool_results != k or not finished.answer:
        raise RuntimeError(
            f"the run {finished.key} ended after {finished.tool_results} of {k} tool calls"
            f" with {finished.answer!r}"
        )
    return finished


def expected_history(k: int) -> list[str]:
    """What a run of K tool rounds saves: the question, K calls and their results, the answer."""
    return ["user", *["tool_call", "tool_result"] * k, "answer"]
