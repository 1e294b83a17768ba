"""Shared foundation of every Shuttle process: settings, logging, gRPC bootstrap, LLM client.

The generated protobuf stubs live in ``shuttle.v1`` (built by ``make proto``).
"""
