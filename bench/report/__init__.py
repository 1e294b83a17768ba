"""Renders docs/benchmarks.md and its charts from the figures the benchmarks saved."""
