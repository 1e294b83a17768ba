"""LLM_PARTIAL: streamed model output that is not the answer (a thinking model's reasoning),
relayed to the log piece by piece while the call streams."""

from __future__ import annotations

from services.executor.log.reporter import RunReporter


class ReasoningRelay:
    """The `on_reasoning` of one streamed call: each piece becomes an LLM_PARTIAL."""

    def __init__(self, reporter: RunReporter, agent_id: str, phase: str) -> None:
        self._reporter = reporter
        self._agent_id = agent_id
        self._phase = phase
        self._index = 0

    async def __call__(self, chunk: str) -> None:
        index = self._index
        self._index += 1
        payload = {
            "chunk": chunk,
            "chunk_index": index,
            # A streamed piece is about one token: the count so far, as the stream stands.
            "total_tokens_so_far": index + 1,
            "kind": "reasoning",
            "phase": self._phase,
        }
        await self._reporter.llm_partial(self._agent_id, payload)
