"""Report sections on many runs: concurrent runs against a slow model, the CPU each run costs,
and the memory each run in flight holds."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from typing import Any

from . import charts
from .context import Context, missing
from .markdown import number, table
from .sections_cpu import cpu_per_run
from .sides import CONCURRENCY_SIDES, SIDES


def react_concurrency(ctx: Context) -> str:
    figures = ctx.results.figures("react_concurrency")
    settings = ctx.results.settings("react_concurrency")
    latency_ms = float(settings.get("latency_s", 0.2)) * 1000
    head = f"""## Concurrent runs against a slow model

```sh
.venv/bin/python -m bench.suites.react_concurrency --counts 1 100 1000
```

Every model call waits {latency_ms:.0f} ms before it answers, so a run of K tool rounds ideally
takes (K + 2) × {latency_ms:.0f} ms however many run at once ((K + 1) × {latency_ms:.0f} ms
for the agents of LangGraph and the Agents SDK, which make no synthesis call: each side is
set against its own model calls). All runs start together; wall is until the last one's
`STREAM_END`. Shuttle is the five processes on the embedded defaults (SQLite, in-process hot
tier), runs in the STANDARD mode as above, read both ways; the peers are the same
conversation with a bare `openai` client, with Shuttle's own model client, as LangGraph's
prebuilt agent, and as the agents that save each run as it goes (LangGraph's with its SQLite
and its PostgreSQL checkpointer, the Agents SDK's with a `SQLiteSession`; see above), all in
the benchmark's process. One run alone is each side's floor.
The executor calls the model through the same SDK on its aiohttp transport
(`SHUTTLE_LLM_HTTP_CLIENT`, the default), as the second peer does; the bare `openai` client
keeps the SDK's default, httpx, whose pool walks every open connection on each request and
each response (`SHUTTLE_LLM_HTTP_CLIENT=httpx` measures Shuttle on it too). The scripted
model server (its own process), the peers and every Shuttle process share the same two
cores, so the loop on Shuttle's model client shows what this machine manages with no engine,
services or log at all. Up to 100
runs: median (min–max) over {settings.get("repeats", "N")} trial(s); larger counts run once.
"""
    if figures is None:
        return head + "\n" + missing("react_concurrency")
    rows = []
    for r in figures["rows"]:
        for side in CONCURRENCY_SIDES:
            if side not in r:
                continue
            s = r[side]
            wall = s["wall_s"]
            runs = s["trials"][-1]["run_s"]
            rows.append(
                [
                    f"{r['count']:,}",
                    str(r["k"]),
                    number(s.get("ideal_s", r["ideal_s"]), 2),
                    SIDES[side],
                    f"{number(wall['median'], 2)} "
                    f"({number(wall['low'], 2)}–{number(wall['high'], 2)})",
                    number(s["x_ideal"]["median"], 2),
                    f"{number(runs['p50'], 2)} / {number(runs['p95'], 2)}",
                    str(s["failed"]),
                ]
            )
    headers = [
        "runs",
        "K",
        "ideal (s)",
        "side",
        "wall (s)",
        "× ideal",
        "one run p50 / p95, last trial (s)",
        "failed",
    ]
    chart = ctx.chart("react_concurrency", charts.react_concurrency, figures, "wall ÷ ideal")
    return f"""{head}
{table(headers, rows, "rrrlrrrr")}
{_failures(figures["rows"])}
{chart}
{_busiest(figures["rows"])}
{cpu_per_run(ctx)}
"""


def _busiest(rows: list[dict[str, Any]]) -> str:
    """Each process's CPU over the last trial at 100 runs: which one sets the pace."""
    row = next((r for r in rows if r["count"] == 100), None)
    if row is None:
        return ""
    lines = []
    for side in CONCURRENCY_SIDES:
        trial = row[side]["trials"][-1] if side in row else None
        if trial is None or "cpu_s" not in trial:
            continue
        wall = trial["wall_s"]
        used = ", ".join(
            f"{name} {number(seconds, 2)} s ({seconds / wall * 100:.0f} % of a core)"
            for name, seconds in trial["cpu_s"].items()
            if seconds >= 0.005
        )
        lines.append(f"- {SIDES[side]}, {number(wall, 2)} s: {used}")
    if not lines:
        return ""
    return (
        '\nCPU each process used during the last trial of 100 runs ("clients" is the '
        "benchmark's own process, where every side's callers and the peers run; the PostgreSQL "
        "server the Postgres checkpointer writes to is not counted):\n\n" + "\n".join(lines) + "\n"
    )


def _failures(rows: list[dict[str, Any]]) -> str:
    """What the failed runs said, so a failure count is never a bare number."""
    notes = []
    for r in rows:
        for side in CONCURRENCY_SIDES:
            s = r.get(side)
            if not s or not s["failed"]:
                continue
            first = next(t["first_failure"] for t in s["trials"] if t["first_failure"])
            reason = " ".join(first.split())[:160]
            notes.append(
                f"- {r['count']:,} runs, {SIDES[side]}: {s['failed']:,} failed, e.g. `{reason}`"
            )
    if not notes:
        return ""
    return "\nFailed runs (counted, not retried):\n\n" + "\n".join(notes) + "\n"


def run_memory(ctx: Context) -> str:
    figures = ctx.results.figures("run_memory")
    runs = ctx.results.settings("run_memory").get("runs", "N")
    head = f"""## Memory per in-flight run

```sh
.venv/bin/python -m bench.suites.run_memory --runs {runs}
```

The five processes on the embedded defaults; the scripted model answers each run's first call
with a calculator call and then holds its second call, so every run is mid-iteration with one
tool round in its history. Runs start over `ExecutorService.StartRun` in four steps; after
each, once the model holds every started run's call, the benchmark reads each process's
resident memory. A few complete runs first warm imports and pools into the baseline. Each
in-flight run is, in the executor, a task with its conversation, an HTTP request to the
model, and a watch on the process's one command stream (`EventService.FollowCommands`:
pause, cancel, interrupts); in the events service, the task following that watch.
"""
    if figures is None:
        return head + "\n" + missing("run_memory")
    per_run, slope = figures["per_run_bytes"], figures["slope_bytes"]
    rows = [
        [name, number(per_run[name] / 1024, 1), number(slope[name] / 1024, 1)] for name in per_run
    ]
    chart = ctx.chart("run_memory", charts.run_memory, figures, "memory added by runs held")
    held = figures["runs"]
    return f"""{head}
{table(["process", f"KB per run ({held} held − none)", "KB per run (slope)"], rows)}

{chart}

Resident memory counts what Python's allocator has taken from the system, so these figures
are upper bounds of what a run holds; they include each run's share of buffers that grow in
steps (gRPC, the HTTP connection pool).
"""
