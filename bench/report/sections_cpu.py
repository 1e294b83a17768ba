"""Report section on where a run's time goes: the CPU each process spends on it, once per run
and per tool round, beside the hops peer's (`run_cpu`)."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from typing import Any

from .context import Context, missing
from .markdown import number, table

NAMES = {
    "events": "events service (hops: its log)",
    "tools": "tools service (hops: its tool host)",
    "executor": "executor",
    "client": "client (the benchmark's process)",
    "all": "all",
}


def cpu_lines(figures: dict[str, Any], side: str) -> dict[str, dict[str, float]]:
    """A side's fitted CPU per process: {"fixed_ms", "per_iteration_ms"}; "all" last."""
    return dict(figures.get("fit", {}).get(side, {}))


def cpu_at(line: dict[str, float], k: int) -> float:
    return line["fixed_ms"] + k * line["per_iteration_ms"]


def describe(lines: dict[str, dict[str, float]], key: str, digits: int = 1) -> str:
    """`events 4.1, executor 6.0, …` over the processes (not "all") of a fitted side."""
    return ", ".join(
        f"{name} {number(line[key], digits)}" for name, line in lines.items() if name != "all"
    )


def cpu_per_run(ctx: Context) -> str:
    figures = ctx.results.figures("run_cpu")
    head = """Where the time goes: CPU.

```sh
.venv/bin/python -m bench.suites.run_cpu --ks 1 20 --runs 40
```

Runs one after another against the zero-latency model, read over `Run`, Shuttle and the hops
peer taking turns. Each process's CPU (user and system, all threads, from /proc) over a
side's runs, per run, and a line fitted through it against K: what a run pays once and what
each tool round adds. The hops peer's three processes play the events service, the tools
service and the executor; the client is the benchmark's process, reading the run."""
    if figures is None or "fit" not in figures:
        return head + "\n\n" + missing("run_cpu")
    ours, hops = cpu_lines(figures, "shuttle"), cpu_lines(figures, "hops")
    rows = []
    for name, line in ours.items():
        theirs = hops.get(name)
        rows.append(
            [
                NAMES.get(name, name),
                number(line["fixed_ms"], 1),
                number(theirs["fixed_ms"], 1) if theirs else "—",
                number(line["per_iteration_ms"], 2),
                number(theirs["per_iteration_ms"], 2) if theirs else "—",
            ]
        )
    headers = [
        "process",
        "Shuttle, once per run (ms)",
        "hops peer, once per run (ms)",
        "Shuttle, per tool round (ms)",
        "hops peer, per tool round (ms)",
    ]
    return f"""{head}

{table(headers, rows)}

{_walls(figures)}

{_beyond_the_peer(ours, hops)}

{_hundred_runs(ctx, ours)}What is left to win is CPU per run: gRPC's cost
per call (about 0.5 ms of server CPU for a bare unary call, 0.2 ms for a message on a stream,
measured on their own, which is why runs are created and appended over one `AppendStream`
call), SQLAlchemy
executing statements, and the `openai` client in the executor.{_NOTES}"""


def _beyond_the_peer(ours: dict[str, dict[str, float]], hops: dict[str, dict[str, float]]) -> str:
    """What Shuttle spends beyond the hops peer, once and per round, and on what."""
    if "all" not in ours or "all" not in hops:
        return ""

    def excess(name: str, key: str) -> float:
        return ours[name][key] - hops[name][key] if name in hops else ours[name][key]

    return (
        f"Beyond the hops peer, a run costs {number(excess('all', 'fixed_ms'), 1)} ms of CPU "
        f"once and {number(excess('all', 'per_iteration_ms'), 2)} ms per tool round. Once per "
        f"run, {number(excess('events', 'fixed_ms'), 1)} ms of it is the events service's: "
        "beyond the peer's log it creates the workflow with its lease (a message on the "
        "executor's append stream, and a transaction) and serves two readers of each run, "
        "the relay and the run's command "
        "watch, each opening with a read of the workflow for its tenant; "
        f"{number(excess('executor', 'fixed_ms'), 1)} ms is the executor's (the catalog, "
        "the workflow, the command watch, tracing and metrics). Per tool round, the tools "
        f"service adds {number(excess('tools', 'per_iteration_ms'), 2)} ms (the ledger's two "
        "statements, the hooks, the audit) and the events service "
        f"{number(excess('events', 'per_iteration_ms'), 2)} (validation, the idempotency row of "
        "each batch, a second reader to wake)."
    )


def _walls(figures: dict[str, Any]) -> str:
    parts = []
    for k in figures["ks"]:
        shuttle = figures["sides"]["shuttle"][str(k)]["wall_ms_median"]
        hops = figures["sides"]["hops"][str(k)]["wall_ms_median"]
        bare = figures["bare_wall_ms_median"][str(k)]
        parts.append(
            f"at K = {k}, {number(shuttle, 1)} ms for Shuttle, {number(hops, 1)} for the hops "
            f"peer and {number(bare, 1)} for the bare loop"
        )
    return f"Wall time per run (medians): {'; '.join(parts)}."


def _hundred_runs(ctx: Context, ours: dict[str, dict[str, float]]) -> str:
    """What 100 concurrent runs need of the two cores, from the fit at their K."""
    concurrency = ctx.results.figures("react_concurrency")
    row = next((r for r in (concurrency or {}).get("rows", []) if r["count"] == 100), None)
    if row is None or "all" not in ours:
        return ""
    k = int(row["k"])
    cpu_s = cpu_at(ours["all"], k) * 100 / 1000
    return (
        f"A hundred runs of K = {k}, as the concurrent runs above, need {number(cpu_s, 1)} s "
        f"of CPU, {number(cpu_s / 2, 1)} s of both cores at best, against an ideal wall time "
        f"of {number(row['ideal_s'], 1)} s; the bare loop with the model server alone takes "
        "most of its wall time the same way. "
    )


_NOTES = """

Every Shuttle process runs its event loop on uvloop (`SHUTTLE_EVENT_LOOP=auto`,
`shuttle/event_loop.py`); the benchmark's own process, where the peers run, keeps asyncio's.
With `SHUTTLE_EVENT_LOOP=asyncio` instead, the services spent 112.8 ms of CPU per run of
K = 5 against 102.0 ms on uvloop, and a run took 89.5 against 82.9 ms of wall time (medians of
three runs of 40 each, the two loops taking turns, on a machine whose reference loop took
192–367 ms).

On a unary gRPC call, OpenTelemetry's interceptors cost 0.13 ms of CPU on each side against
none (`python -m bench.suites.grpc_tracing`). Under a trace nobody records, Shuttle's
(`shuttle/grpc_tracing.py`) pass the context on without building spans, which saves about half
of that: 0.480 ms per call on the server against OpenTelemetry's 0.547, 0.341 on the client
against 0.394. The SQLite writer and reader threads keep their connections instead of checking
one out of the pool per transaction: a small write plus a read costs 0.65 ms of CPU, against
0.79 ms with a connection checked out each time. Both measured on their own, on a machine
whose reference loop took 167–179 ms.

A run's batch of events lingers 5 ms after its oldest event (`SHUTTLE_EVENTS_LINGER_MS`,
`services/executor/log/emitter.py`) unless it is full or the run flushes, so that the events
before and after a fast tool call share one Append. Runs of 50 tool rounds at the
zero-latency model make 46 Appends with the linger and 72 without it
(`SHUTTLE_EVENTS_LINGER_MS=0`); the events service's CPU per iteration is 2.29 ms against
2.97, all Shuttle processes' 8.20 against 9.08 ms (20 runs each way, taking turns, read over
`Run`; 2.18 against 2.94 and 7.12 against 8.14 ms read with `StartRun` + `StreamBatches`).
Wall time per iteration is the same within the noise (8.00 against 7.89 ms over `Run`, 6.99
against 7.14 ms from the log), and so is 100 concurrent runs' at 200 ms per model call
(2.40 / 2.25× ideal against 2.32 / 2.27×), where tool calls queue for longer than the linger.
Measured on their own, on a machine whose reference loop took 214–321 ms."""
