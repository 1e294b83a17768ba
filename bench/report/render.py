"""The whole docs/benchmarks.md: machine and date, aims, then one section per benchmark."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.support.results import REFERENCE_LOOP_ADDITIONS

from . import sections_engine, sections_events, sections_replicas, sections_runs
from .aims import aims_table
from .context import Context
from .load import Results
from .markdown import number
from .short_run_aims import short_run_aims_table

SECTIONS: tuple[Callable[[Context], str], ...] = (
    sections_engine.llm_overhead,
    sections_engine.react_overhead,
    sections_runs.react_concurrency,
    sections_runs.run_memory,
    sections_replicas.replicas,
    sections_replicas.takeover,
    sections_engine.end_to_end,
    sections_engine.tool_hooks,
    sections_events.events_append,
    sections_events.events_latency,
    sections_events.sse_fanout,
    sections_events.sse_idle,
)


def machine_line(machines: list[dict[str, Any]]) -> str:
    if not machines:
        return "*No results were found: run `make bench`.*"
    first = machines[0]
    dates = sorted(datetime.fromisoformat(m["measured_at"]) for m in machines)
    line = (
        f"Measured on {dates[0]:%Y-%m-%d} ({dates[0]:%H:%M}–{dates[-1]:%H:%M} UTC): "
        f"{first['cpus']} CPUs, {number(first['memory_bytes'] / 2**30, 1)} GB RAM, "
        f"Python {first['python']}, {first['system']} ({first['processor']}), PostgreSQL and "
        "Redis on the same host."
    )
    speeds = [m["reference_loop_ms"] for m in machines if "reference_loop_ms" in m]
    if speeds:
        line += (
            f" A reference loop of {REFERENCE_LOOP_ADDITIONS:,} integer additions in plain "
            f"Python took {number(min(speeds), 0)}–{number(max(speeds), 0)} ms (compare it "
            "before comparing figures across machines)."
        )
    if all("other_cpus" in m for m in machines):
        others = [m["other_cpus"] for m in machines]
        return (
            f"{line} Processes outside the benchmarks (PostgreSQL and Redis included) used "
            f"{number(min(others), 2)}–{number(max(others), 2)} of the {first['cpus']} CPUs "
            "while they ran."
        )
    loads = [m["load_average"][0] for m in machines]
    return (
        f"{line} One-minute load average when each benchmark finished: "
        f"{number(min(loads), 1)}–{number(max(loads), 1)}."
    )


# Other work above this many CPUs' worth makes absolute figures suspect.
OTHER_WORK_LIMIT_CPUS = 0.5


def busy(machines: list[dict[str, Any]]) -> bool:
    """Whether other work shared the machine. Without a reading of it (results saved by a
    benchmark run on its own), a load average above the CPU count is the best hint."""
    if machines and all("other_cpus" in m for m in machines):
        return any(m["other_cpus"] > OTHER_WORK_LIMIT_CPUS for m in machines)
    return any(m["load_average"][0] > m["cpus"] for m in machines)


def render(results: Results, images: Path, doc: Path) -> str:
    prefix = Path(os.path.relpath(images, doc.parent)).as_posix()
    ctx = Context(results, images, prefix)
    quick = any("--quick" in d.get("command", "") for d in results.documents.values())
    note = ""
    if quick:
        note += (
            "\n**These figures come from `--quick` sizes: a development run, not a measurement.**\n"
        )
    if busy(results.machines()):
        note += (
            "\n**Other work kept this machine busy while measuring: absolute figures are "
            "inflated and noisy, to be measured again on a quiet machine; the columns of one "
            "run still compare.**\n"
        )
    head = f"""# Benchmarks

This file is written by `make bench` (`python -m bench`, then `python -m bench.report`); edit
the benchmarks or `bench/report/`, not this file. Each benchmark prints its figures beside a
peer measured in the same run, so a reader can tell what the system adds. Numbers from another
machine will differ; the columns relate to each other.

{machine_line(results.machines())}
{note}
## Aims

{aims_table(results)}

### Short runs, beside in-process frameworks

Ratios of medians measured side by side in one run (`react_overhead`, `end_to_end`,
`react_concurrency`). Where an aim is missed, the last column says why, from two figures.
The hops peer's: the same crossings between processes on bare grpc.aio, which no engine work
can go below. And the CPU a run or a task costs each process (`run_cpu`, `end_to_end`,
`react_concurrency`): on two cores every process takes its turn, so CPU beyond the peer's is
wall time beyond it.

{short_run_aims_table(results)}
"""
    body = "\n".join(section(ctx) for section in SECTIONS)
    tail = """
## Reproducing

```sh
make bench                        # installs the `bench` extra, runs everything, rewrites this file
.venv/bin/python -m bench --quick # small sizes, for development (a few minutes)
.venv/bin/python -m bench --only sse_idle run_memory
.venv/bin/python -m bench.report  # re-render from var/bench/*.json without measuring
```

Every benchmark also runs alone (`python -m bench.suites.<module>`, e.g.
`bench.suites.sse_idle`) and prints its table; `--json PATH` saves its figures, `--quick`
picks small sizes, and each has size arguments (`--help`). The
peers (`langgraph`, `langchain-openai`) and `matplotlib` come from the `bench` extra; the
product never imports them. Figures measured on a machine shared with other work are noisy:
compare columns of one run, not runs of different days.
"""
    return head + "\n" + body + tail


def render_files(results_dir: Path, doc: Path, images: Path) -> None:
    results = Results.read(results_dir)
    text = render(results, images, doc)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
