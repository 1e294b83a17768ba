"""The executor's ports over gRPC: one module per backend (events, tools, planner), each the
only one that holds that service's client, and a tracing decorator beside them."""
