"""How the report names the sides of the ReAct benchmarks."""

SIDES = {
    "shuttle": "Shuttle, `Run`",
    "shuttle_log": "Shuttle, `StartRun` + `StreamBatches`",
    "hops": "the same hops on bare grpc.aio",
    "bare": "bare `openai` loop",
    "client_loop": "bare loop on Shuttle's model client",
    "langgraph": "LangGraph",
}
BASELINE_SHORT = {"client_loop": "model-client loop", "bare": "bare"}
SHUTTLE_SIDES = ("shuttle", "shuttle_log")
"""Two ways of reading a run: the executor relays its log (`Run`), or the caller reads it
from the events service in batches, as the gateway does."""
PEER_LOOPS = ("bare", "client_loop")
"""The same conversation without Shuttle, on the `openai` client and on Shuttle's own."""
