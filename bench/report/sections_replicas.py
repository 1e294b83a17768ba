"""Report sections on executor replicas: one against three on the same machine, and how long
a run waits for another replica once its own executor dies or stops."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from .context import Context, missing
from .markdown import number, table


def replicas(ctx: Context) -> str:
    figures = ctx.results.figures("replicas")
    settings = ctx.results.settings("replicas")
    k = settings.get("k", 3)
    latency_ms = float(settings.get("latency_s", 0.05)) * 1000
    runs, concurrency = settings.get("runs", "N"), settings.get("concurrency", "C")
    head = f"""## One executor against three

```sh
.venv/bin/python -m bench.suites.replicas --k 3 --runs 300 --concurrency 30
```

The stack as `shuttle up --replicas executor=N` starts it: PostgreSQL and Redis, one process
of every other service, and N executors whose addresses every client dials as one
round_robin target. {runs} runs of K = {k} tool rounds against the scripted model
({latency_ms:.0f} ms per call, its own process), {concurrency} in flight at a time, each
started with `ExecutorService.StartRun` and read from the events service to `STREAM_END`,
after a few to warm up. CPU is every Shuttle process's (user and system, from /proc;
PostgreSQL's and Redis's not included) over the measured runs, per run; the spread is each
run's lease owner."""
    if figures is None:
        return head + "\n\n" + missing("replicas")
    rows = []
    for count, found in figures.items():
        executors = {n: ms for n, ms in found["cpu_ms_per_run"].items() if n.startswith("executor")}
        rows.append(
            [
                count,
                number(found["runs_per_second"], 1),
                number(found["cpu_ms_per_run_total"], 1),
                number(sum(executors.values()), 1),
                ", ".join(str(n) for n in found["runs_by_executor"].values()),
            ]
        )
    headers = ["executors", "runs/s", "ms of CPU per run", "of it in executors", "runs each"]
    one, three = figures.get("1"), figures.get("3")
    comparison = ""
    if one and three:
        busiest, busiest_ms = max(one["cpu_ms_per_run"].items(), key=lambda item: item[1])
        comparison = (
            f"Three executors ran {number(three['runs_per_second'] / one['runs_per_second'], 2)}"
            f"× the runs per second of one, at\n"
            f"{number(three['cpu_ms_per_run_total'] / one['cpu_ms_per_run_total'], 2)}× the "
            f"CPU per run. With one executor, the busiest Shuttle process was\n{busiest} "
            f"({number(busiest_ms * one['runs_per_second'] / 1000, 2)} of a core)"
            + (", not the executor." if busiest != "executor" else ".")
        )
    return f"""{head}

{table(headers, rows, "rrrrl")}

{comparison}

Two cores cannot show throughput scaling: every Shuttle process, PostgreSQL, Redis, the
model server and the benchmark's own client share them, so a second and third executor add
no CPU to run on, only event loops, connections and lease renewals of their own (what more
CPU per run there is, if any, goes to those). What the figures do show is that the layout
works as a cluster's would: `StartRun` calls spread evenly over the replicas (round_robin
over one comma-listed target), every run completes with its events read from the shared log,
and spreading costs only that overhead. Showing throughput grow with executors needs more
cores or machines than this benchmark has."""


def takeover(ctx: Context) -> str:
    figures = ctx.results.figures("takeover")
    settings = ctx.results.settings("takeover")
    lease, poll = settings.get("lease_s", 1.5), settings.get("poll_s", 0.2)
    head = f"""## A run taken over

```sh
.venv/bin/python -m bench.suites.takeover --rounds 20 --lease 1.5 --poll 0.2
```

Three executors on PostgreSQL and Redis, run lease {number(lease, 1)} s
(`SHUTTLE_RUN_LEASE_SECONDS`), every replica looking for runs to take over every
{number(poll, 1)} s (`SHUTTLE_RUN_TAKEOVER_POLL_SECONDS`). Each of
{settings.get("rounds", "N")} runs per row is held in its second model call, then the
executor holding its lease is killed (-9) or stopped (SIGTERM); times run from the kill or
signal to what a `StreamBatches` reader or a `GetWorkflow` poll (every 10 ms) sees."""
    if figures is None:
        return head + "\n\n" + missing("takeover")
    rows = [
        [label, number(figures[key]["p50"] / 1000, 2), number(figures[key]["p99"] / 1000, 2), aim]
        for label, key, aim in (
            (
                "kill -9 → the resumed run's first event",
                "kill_to_resumed_ms",
                f"≤ lease + 2 s = {number(lease + 2, 1)} s",
            ),
            ("SIGTERM → the lease released", "sigterm_to_release_ms", "< 1 s"),
            ("SIGTERM → the new owner's first event", "sigterm_to_resumed_ms", "< 1 s"),
        )
    ]
    return f"""{head}

{table(["from → to", "p50 (s)", "p99 (s)", "aim"], rows, "lrrl")}

A killed executor's runs wait for the lease to lapse (no one can tell a dead executor from a
slow one sooner), then for the next takeover poll, then for the new owner to read the run's
log back; a stopping executor releases its leases at once, so only the poll remains."""
