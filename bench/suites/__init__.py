"""The benchmarks: each one a module, run as `python -m bench.suites.<module>`.

Every benchmark prints its table. `python -m bench` runs those its SUITE lists, each as a
process of its own saving its figures (`--json PATH`) for the report. grpc_tracing and
executor_lost only run alone: the docs quote their figures (docs/operations.md,
docs/reliability.md, the report's prose) rather than render them from a saved result.
"""
