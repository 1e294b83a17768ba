"""How the report names the sides of the ReAct benchmarks."""

SIDES = {
    "shuttle": "Shuttle, `Run`",
    "shuttle_log": "Shuttle, `StartRun` + `StreamBatches`",
    "hops": "the same hops on bare grpc.aio",
    "bare": "bare `openai` loop",
    "client_loop": "bare loop on Shuttle's model client",
    "langgraph": "LangGraph",
    "langgraph_sqlite": "LangGraph + SQLite checkpointer",
    "langgraph_postgres": "LangGraph + Postgres checkpointer",
    "agents_sqlite": "OpenAI Agents SDK + SQLiteSession",
}
BASELINE_SHORT = {"client_loop": "model-client loop", "bare": "bare"}
SHUTTLE_SIDES = ("shuttle", "shuttle_log")
"""Two ways of reading a run: the executor relays its log (`Run`), or the caller reads it
from the events service in batches, as the gateway does."""
PEER_LOOPS = ("bare", "client_loop")
"""The same conversation without Shuttle, on the `openai` client and on Shuttle's own."""
PERSISTING_PEERS = ("langgraph_sqlite", "langgraph_postgres", "agents_sqlite")
"""Agents that save each run as it goes, as Shuttle's log does."""
CONCURRENCY_SIDES = (*SHUTTLE_SIDES, *PEER_LOOPS, "langgraph", *PERSISTING_PEERS)
"""The sides of concurrent runs, in the order the report shows them."""
