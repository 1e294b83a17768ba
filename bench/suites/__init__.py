"""The benchmarks: each one a module, run as `python -m bench.suites.<module>`.

Every benchmark prints its table; with `--json PATH` it saves its figures for the report.
`python -m bench` runs those its SUITE lists, each as a process of its own.
"""
