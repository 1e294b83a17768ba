"""Report sections on the agent engine: LLM client, ReAct loop, concurrency, memory."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from typing import Any

from . import charts
from .aims import REACT_BASELINES
from .context import Context, missing
from .markdown import number, spread, table

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


def llm_overhead(ctx: Context) -> str:
    figures = ctx.results.figures("llm_overhead")
    calls = ctx.results.settings("llm_overhead").get("calls", "N")
    head = f"""## LLM client overhead vs. history length

```sh
.venv/bin/python -m bench.suites.llm_overhead --calls {calls}
```

Client time per chat call with an in-process HTTP transport that answers at once, so the
figure is only what the client spends building, encoding and parsing. The plain `openai`
client's `chat.completions.create` runs every message through its request transform; Shuttle
encodes the body itself and sends it with the same client's `post`. Median (p25–p75) of
{calls} calls.
"""
    if figures is None:
        return head + "\n" + missing("llm_overhead")
    rows = [
        [
            str(r["messages"]),
            spread(r["openai_ms"], 3),
            spread(r["shuttle_ms"], 3),
            f"{r['openai_ms']['median'] / r['shuttle_ms']['median']:.1f}×",
        ]
        for r in figures["rows"]
    ]
    body = table(["messages", "`openai` create (ms)", "Shuttle `chat` (ms)", "speed-up"], rows)
    chart = ctx.chart("llm_overhead", charts.llm_overhead, figures, "LLM client time per call")
    return f"""{head}
{body}

{chart}

What still grows on Shuttle's side is encoding and sending the bytes themselves (the
200-message history is about 100 KB of JSON). The body is encoded with orjson: with the
standard `json.dumps` the 200-message call took 0.74 ms and the 50-message one 0.44 ms
(2026-11-30, on a machine whose reference loop took 55–69 ms), twice as long and more.
"""


def react_overhead(ctx: Context) -> str:
    figures = ctx.results.figures("react_overhead")
    runs = ctx.results.settings("react_overhead").get("runs", "N")
    head = f"""## ReAct engine overhead per iteration

```sh
.venv/bin/python -m bench.suites.react_overhead --runs {runs}   # LangGraph from the `bench` extra
```

Shuttle runs as its real processes (events, tools, planner, executor, gateway; SQLite,
in-process hot tier), so an iteration includes the executor's bookkeeping,
`ToolService.Execute` over gRPC, and five events committed to the log. Each run is read until
`STREAM_END` in one of two ways: over `ExecutorService.Run`, where the executor relays the log
one event per message, or with `StartRun` and then the log read in batches straight from the
events service (`EventService.StreamBatches`), as the gateway reads it. Runs ask for the
STANDARD mode, since the peers have no router (left to the planner, routing is one more model
call per run), and the completion checklist is switched off, so that every side makes the
same model calls (K tool rounds, an answer, and for Shuttle and the bare loop a streamed
synthesis; LangGraph's prebuilt agent makes no synthesis call). The bare loops and LangGraph
(`create_react_agent` with `langchain-openai`) call the calculator in-process; one bare loop
uses the `openai` client's `chat.completions.create`, the other the model client the
executor calls the model with (`shuttle.llm`, on its default aiohttp transport), so that the
difference between it and Shuttle is what the engine, the services and the log add to the
model calls. A third peer, the same hops on bare grpc.aio (`bench/peers/hops.py`), runs that
loop in a process of its own and makes Shuttle's calls across processes for each iteration:
the tool call to a tool host, the run's events (as many and as large as Shuttle's, batched as
its emitter batches them) over one AppendStream to a log that commits each batch to SQLite
before answering, and the log read back and relayed over `Run`, with none of Shuttle's
validation, idempotency, tenancy, leases, hooks, audit, tracing or metrics. The difference
between it and the model-client loop is what the process layout costs by itself; the
difference between Shuttle and it is what Shuttle's own code costs. All sides talk
to one zero-latency scripted OpenAI-compatible server (a process of its own,
`bench/support/model_server.py`); for each K the sides take turns run by run, so load from
elsewhere falls on all of them alike. Figures are run time ÷ K:
median (p25–p75) of {runs} runs.
"""
    if figures is None:
        return head + "\n" + missing("react_overhead")
    per_iteration: dict[str, dict[str, Any]] = figures["per_iteration_ms"]
    names = list(per_iteration)
    rows = []
    baseline = next((n for n in REACT_BASELINES if n in per_iteration), "")
    ours = [n for n in SHUTTLE_SIDES if n in per_iteration] if baseline else []
    for k in figures["ks"]:
        cells = [str(k)] + [spread(per_iteration[n][str(k)]) for n in names]
        theirs = per_iteration[baseline][str(k)]["median"] if baseline else 0.0
        cells += [number(per_iteration[n][str(k)]["median"] - theirs, 2) for n in ours]
        rows.append(cells)
    headers = ["K tool iterations", *(f"{SIDES.get(n, n)} ms/iter" for n in names)]
    headers += [f"{SIDES[n]} − {BASELINE_SHORT[baseline]}" for n in ours]
    fits = figures["fit"]
    fit_rows = [
        [SIDES.get(n, n), number(f["per_iteration_ms"], 2), number(f["fixed_ms"], 1)]
        for n, f in fits.items()
    ]
    chart = ctx.chart("react_overhead", charts.react_overhead, figures, "ms per iteration by K")
    return f"""{head}
{table(headers, rows)}

{chart}

Fitting the medians to run time = fixed + K × per-iteration separates what one more
iteration costs from what every run pays once (creating the workflow, the first Append,
following the log, the streamed synthesis, closing the log):

{table(["side", "per iteration (ms)", "fixed per run (ms)"], fit_rows)}

What the `openai` bare loop and LangGraph spend per call grows with the conversation (the
`openai` SDK's request transform walks every message; Shuttle's LLM layer encodes the body
itself, see above), so their cost per iteration rises with K, while Shuttle's falls towards
its marginal cost as its fixed part is spread over more iterations. Beside that SDK loop,
then, what Shuttle adds shrinks with K for reasons that are not Shuttle's, which is why the
aim is judged beside the loop on Shuttle's own model client: the same model calls and
nothing else. The aim is set at K = 50 and flat in K; at K = 5 a run's fixed part is spread
over only five iterations (the fit above gives it). Where the added time goes: a py-spy
profile of the executor during runs of K = 25 (`py-spy record -f raw` on the process) puts
the model call (SDK, HTTP) at about 23 % of its busy samples, the rest of the engine (loop,
policies, reporter, emitter) at about 8 %, and gRPC (the tool call, the Appends, relaying
the log, and the library's compiled callbacks) at about 35 %; the section on CPU per run
below gives what each process spends. Timed from inside the loop instead (timestamps around
the model call and the tool batch, runs of K = 50 beside the bare loop, measured on their
own), the engine's own steps took 0.15 ms of an iteration; the model call took 2.7 ms (median)
where the bare loop's whole iteration took 1.5 ms, and the tool batch 2.1 ms where the same
`ToolService.Execute` timed alone answers in 1.1 ms. What Shuttle adds per iteration is the
tool's round trip and, on both waits, the two cores the iteration's log traffic (two Appends,
their answers, five events relayed) shares with them.
"""


def react_concurrency(ctx: Context) -> str:
    figures = ctx.results.figures("react_concurrency")
    settings = ctx.results.settings("react_concurrency")
    latency_ms = float(settings.get("latency_s", 0.2)) * 1000
    head = f"""## Concurrent runs against a slow model

```sh
.venv/bin/python -m bench.suites.react_concurrency --counts 100 1000
```

Every model call waits {latency_ms:.0f} ms before it answers, so a run of K tool rounds ideally
takes (K + 2) × {latency_ms:.0f} ms however many run at once. All runs start together; wall is
until the last one's `STREAM_END`. Shuttle is the five processes on the embedded defaults
(SQLite, in-process hot tier), runs in the STANDARD mode as above, read both ways; the peers
are the same conversation with a bare `openai` client and with Shuttle's own model client.
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
        for side in (*SHUTTLE_SIDES, *PEER_LOOPS):
            if side not in r:
                continue
            s = r[side]
            wall = s["wall_s"]
            runs = s["trials"][-1]["run_s"]
            rows.append(
                [
                    f"{r['count']:,}",
                    str(r["k"]),
                    number(r["ideal_s"], 2),
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
{_cpu_per_run(ctx)}
"""


def _busiest(rows: list[dict[str, Any]]) -> str:
    """Each process's CPU over the last trial at 100 runs: which one sets the pace."""
    row = next((r for r in rows if r["count"] == 100), None)
    if row is None:
        return ""
    lines = []
    for side in (*SHUTTLE_SIDES, *PEER_LOOPS):
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
        "benchmark's own process, where either side's callers run):\n\n" + "\n".join(lines) + "\n"
    )


def _cpu_per_run(ctx: Context) -> str:
    """Where the time goes at 100 runs: the CPU one run costs each process (`run_cpu`)."""
    figures = ctx.results.figures("run_cpu")
    head = """Where the time goes at 100 runs: CPU.

```sh
.venv/bin/python -m bench.suites.run_cpu --k 5 --runs 40
```

Runs of K = 5 tool rounds one after another against the zero-latency model; each process's
CPU (user and system, all threads, from /proc) over the measured runs, per run."""
    if figures is None:
        return head + "\n\n" + missing("run_cpu")
    rows = [[name, number(ms, 1)] for name, ms in figures["cpu_ms_per_run"].items() if ms >= 0.05]
    rows.append(["all Shuttle processes", number(figures["cpu_ms_per_run_total"], 1)])
    hundred_s = figures["cpu_ms_per_run_total"] / 10  # 100 runs, in seconds of CPU
    return f"""{head}

{table(["process", "ms of CPU per run"], rows)}

A run took {number(figures["wall_ms_median"], 1)} ms (median) of wall time, the bare loop
{number(figures["bare_wall_ms_median"], 1)} ms. A hundred such runs need
{number(hundred_s, 1)} s of CPU, {number(hundred_s / 2, 1)} s of both cores at best, against an
ideal wall time of 1.4 s at 200 ms per model call; the bare loop with the model server alone
takes most of its wall time the same way. What is left to win is CPU per run: gRPC's cost
per call (about 0.5 ms of server CPU for a bare unary call, 0.2 ms for a message on a stream,
measured on their own, which is why runs append over one `AppendStream` call), SQLAlchemy
executing statements, and the `openai` client in the executor.

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
`services/executor/emitter.py`) unless it is full or the run flushes, so that the events
before and after a fast tool call share one Append. Runs of 50 tool rounds at the
zero-latency model make 46 Appends with the linger and 72 without it
(`SHUTTLE_EVENTS_LINGER_MS=0`); the events service's CPU per iteration is 2.29 ms against
2.97, all Shuttle processes' 8.20 against 9.08 ms (20 runs each way, taking turns, read over
`Run`; 2.18 against 2.94 and 7.12 against 8.14 ms read with `StartRun` + `StreamBatches`).
Wall time per iteration is the same within the noise (8.00 against 7.89 ms over `Run`, 6.99
against 7.14 ms from the log), and so is 100 concurrent runs' at 200 ms per model call
(2.40 / 2.25× ideal against 2.32 / 2.27×), where tool calls queue for longer than the linger.
Measured on their own, on a machine whose reference loop took 214–321 ms."""


def _failures(rows: list[dict[str, Any]]) -> str:
    """What the failed runs said, so a failure count is never a bare number."""
    notes = []
    for r in rows:
        for side in (*SHUTTLE_SIDES, *PEER_LOOPS):
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


def end_to_end(ctx: Context) -> str:
    figures = ctx.results.figures("end_to_end")
    runs = ctx.results.settings("end_to_end").get("runs", "N")
    head = f"""## One task end to end

```sh
.venv/bin/python -m bench.suites.end_to_end --runs {runs}
```

One task (`What is 12*7?`: a tool call, an answer, a streamed synthesis and one calculator
call) from `POST /api/v1/tasks` to the closed SSE stream, through all five processes on the
embedded defaults (SQLite, in-process hot tier), against a zero-latency scripted model.
*Peer*: the same three model calls and the calculator in-process with a bare `openai` client
against the same server.
"""
    if figures is None:
        return head + "\n" + missing("end_to_end")
    bare, ours = figures["bare_ms"], figures["shuttle_ms"]
    rows = [
        ["bare `openai` loop", *(number(bare[q], 1) + " ms" for q in ("p50", "p95", "p99"))],
        [
            f"Shuttle (5 processes, {figures['events_per_run']} events per run over SSE)",
            *(number(ours[q], 1) + " ms" for q in ("p50", "p95", "p99")),
        ],
    ]
    together = figures["concurrent"]
    memory = ", ".join(f"{name} {mb:.0f} MB" for name, mb in figures["rss_mb"].items())
    return f"""{head}
{table([f"{runs} sequential runs", "p50", "p95", "p99"], rows)}

Shuttle adds {number(ours["p50"] - bare["p50"], 1)} ms per task (median); profiles of the
services put most of it in the workflow's first SQLite commits and the log's appends.
{together["runs"]} concurrent tasks: {number(together["wall_s"], 2)} s wall,
{number(together["runs_per_s"], 1)} tasks/s, {number(together["events_per_s"])} events/s delivered,
p50 {number(together["run_ms"]["p50"])} ms per task. Resident memory after the runs: {memory}.

The gateway's listening socket sets `TCP_NODELAY`: without it every HTTP response waits
~40 ms on the client's delayed ACK (uvicorn writes headers and body separately).
"""


def tool_hooks(ctx: Context) -> str:
    figures = ctx.results.figures("tool_hooks")
    calls = ctx.results.settings("tool_hooks").get("calls", "N")
    head = f"""## Tool hook chain

```sh
.venv/bin/python -m bench.suites.tool_hooks --calls {calls}
```

The calculator through `ToolHost.execute` in one process, with no hooks and with the
deployment defaults (read-only guard, truncation, an audit row in SQLite) plus an in-process
rate limiter; the difference is the policy layer, mostly the audit row's commit.
"""
    if figures is None:
        return head + "\n" + missing("tool_hooks")
    rows = [
        [label, number(figures[key]["median"], 1), number(figures[key]["p95"], 1)]
        for label, key in (("no hooks", "no_hooks_us"), ("defaults + rate limit", "hooks_us"))
    ]
    return f"{head}\n{table([f'{calls} calls', 'median (µs)', 'p95 (µs)'], rows)}\n"


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
