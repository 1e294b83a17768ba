"""Report sections on the event log: append throughput, subscriber latency, SSE fan-out."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from typing import Any

from . import charts
from .context import Context, missing
from .markdown import number, table


def events_append(ctx: Context) -> str:
    figures = ctx.results.figures("events_append")
    s = ctx.results.settings("events_append")
    shape = (
        f"{s.get('workflows', 'W')} workflows × {s.get('batches', 'B')} batches × "
        f"{s.get('batch', 'N')} events"
    )
    head = f"""## Event log

### Append throughput

```sh
.venv/bin/python -m bench.suites.events_append
```

{shape} (`PROGRESS`, ~110-byte payload), one producer and one live subscriber per workflow,
the events service as its own process (`python -m services.events`), appends and streams over
gRPC, every batch idempotent (producer id + batch number). *Peer*: the same rows through bare
SQLAlchemy inserts in the same batches, one transaction per batch, no seq counter, no gRPC, no
readers.
"""
    if figures is None:
        return head + "\n" + missing("events_append")
    batched = ctx.results.figures("events_append-batched")
    labels = {
        "sqlite": "SQLite (embedded, in-process hot tier)",
        "postgresql": "PostgreSQL",
        "postgresql+redis": "PostgreSQL + Redis hot tier",
    }
    rows = [
        [
            labels.get(r["backend"], r["backend"]),
            number(r["appended_per_s"]),
            number(r["delivered_per_s"]),
            number(r["peer_per_s"]),
        ]
        for r in figures["rows"]
    ]
    batched_rows = [
        [
            labels.get(r["backend"], r["backend"]),
            number(r["appended_per_s"]),
            number(r["delivered_per_s"]),
        ]
        for r in (batched["rows"] if batched else [])
    ]
    batched_table = (
        table(["backend", "appended events/s", "delivered events/s"], batched_rows)
        if batched
        else missing("events_append-batched")
    )
    return f"""{head}
Subscribers on `Stream` (one event per gRPC message):

{table(["backend", "appended events/s", "delivered events/s", "peer inserts/s"], rows)}

Subscribers on `StreamBatches` (`--batched`: several events per message, as the executor's
`Run` and the gateway's SSE routes read the log):

{batched_table}

Concurrent appends share one transaction (group commit: one writer per lane takes every
queued batch, SQLite one lane, PostgreSQL sixteen), so the commit rate does not bound
single-event producers. With `Stream` subscribers the service's one event loop spends most of
its time on gRPC's per-message cost of server streaming (a bare `grpc.aio` server, measured on
its own, moves ~17,600 messages/s to 8 readers); `StreamBatches` sends a burst of events as
one message.

With `StreamBatches` readers the events service is the bottleneck, at one core: Python runs
one thread at a time, so what counts is the time each step holds the interpreter
(`py-spy record --gil` on the service). Rows go in with one executemany of tuples
(`services/events/bulk_insert.py`): SQLAlchemy building each inserted row's parameters took a
quarter of that time (on the writer thread). Payloads are parsed with orjson (the standard
parser decides what orjson refuses): validating them with `json` took about a tenth on the
event loop. A labelled counter is updated once per event type and batch, and type names and
values are looked up by dict: per event and through the protobuf enum, each took a few
percent. With Redis, a batch goes in as one script call: a pipeline of one `XADD` per event,
whose packing and replies the client handles in Python, took a third of the interpreter's
time there. Against per-row parameters, `json` and one `XADD` per event, taking turns five
times on one machine, this benchmark reaches 15.2k–19.7k events/s on SQLite against
9.6k–12.7k, 10.2k–12.3k on PostgreSQL against 8.6k–10.2k, and 8.2k–10.4k on PostgreSQL +
Redis against 5.9k–7.6k (two turns).
"""


def _latency_cell(side: dict[str, Any] | None) -> str:
    if not side:
        return "—"
    return f"{number(side['p50'], 1)} / {number(side['p99'], 1)} ms"


def _delivered(side: dict[str, Any]) -> str:
    cell = f"{side['delivered']:,}/{side['expected']:,}"
    failed = side.get("failed_appends", 0)
    return f"{cell} ({failed:,} appends failed)" if failed else cell


def events_latency(ctx: Context) -> str:
    head = """### Emit → subscriber latency (gRPC subscribers)

```sh
.venv/bin/python -m bench.suites.events_latency [--backend pg] [--sequential]
```

One workflow; the producer emits each event as its own append on schedule (without waiting
for the previous one, as many concurrent runs would); latency runs from the emit time carried
in the payload to a subscriber holding the event, so it includes the SQL commit. Over gRPC,
measuring starts once every subscriber holds a first event, so opening the streams (seconds,
for 1,000 of them on PostgreSQL) is not counted. *peer*: a
bare asyncio fan-out (a queue per subscriber). *log*: the `EventLog` in-process on SQLite, no
gRPC. *grpc*: the events service as its own process, over gRPC, the appends over one
`AppendStream` call as the executor's (`--unary`: one `Append` call each). *bare grpc*: the
same subscribers and producer against a bare `grpc.aio` server of the same messages that keeps
each log in a list (`bench/peers/grpc_fanout.py`: no SQL, no validation, no telemetry), which
wakes its readers as the events service does; *unpaced*, on every append. p50 / p99.

Readers of one log are woken in rounds (`shuttle/paced_signal.py`): the first change after a
quiet spell wakes them at once; while changes keep coming, the next wake-up waits until
`SHUTTLE_EVENTS_FANOUT_SECONDS_PER_READER` (0.1 ms) per reader has passed since the last, at
most 0.1 s. Woken on every change, 100 readers of 1,000 events/s cost 100,000 wake-ups and
messages a second, more than two cores serve; the unpaced column shows where that leads.

Every process freezes its startup heap once it is serving (`SHUTTLE_GC_FREEZE`,
`shuttle/heap.py`). Profiled with 100 `StreamBatches` readers of 1,000 events/s, the events
service held the interpreter a tenth of the time for the garbage collector, whose full
collections walked the whole startup heap; left out of them, the readers' p99 is 35–99 ms,
against 82–219 ms with `SHUTTLE_GC_FREEZE=false` (three runs each way of 3,000 events on
SQLite, measured on their own).
"""
    parts = [head]
    for name, title in (
        ("events_latency-sqlite", "SQLite (embedded)"),
        ("events_latency-pg", "PostgreSQL + Redis (the grpc column; peer and log as above)"),
        ("events_latency-batched", "SQLite, subscribers on `StreamBatches` (`--batched`)"),
        ("events_latency-pg-batched", "PostgreSQL + Redis, subscribers on `StreamBatches`"),
    ):
        figures = ctx.results.figures(name)
        if figures is None:
            parts.append(f"{title}: " + missing(name))
            continue
        sides = [
            s
            for s in ("peer", "log", "grpc", "bare grpc", "bare grpc, unpaced")
            if any(s in r for r in figures["rows"])
        ]
        rows = [
            [
                f"{r['subscribers']:,}, {r['rate']:,.0f} events/s",
                *(_latency_cell(r.get(side)) for side in sides),
                _delivered(r["grpc"]),
            ]
            for r in figures["rows"]
        ]
        headers = ["subscribers, rate", *sides, "grpc delivered"]
        parts.append(f"{title}:\n\n{table(headers, rows)}\n{_busy_at_the_aim(figures['rows'])}")
    figures = ctx.results.figures("events_latency-sequential")
    parts.append(
        """With `--sequential` the producer waits for each append, as one executor run does, so the
rate is what one producer reaches (SQLite):
"""
    )
    if figures is None:
        parts.append(missing("events_latency-sequential"))
    else:
        rows = [
            [
                f"{r['subscribers']:,}",
                f"{number(r['log']['reached_per_s'])}/s",
                _latency_cell(r["log"]),
                f"{_latency_cell(r['grpc'])} ({number(r['grpc']['reached_per_s'])}/s)",
            ]
            for r in figures["rows"]
            if r["rate"]
            == max(row["rate"] for row in figures["rows"] if row["subscribers"] == r["subscribers"])
        ]
        parts.append(
            table(["subscribers", "log reached", "log p50 / p99", "grpc p50 / p99 (reached)"], rows)
        )
    parts.append(
        """
One append per event on one workflow is bounded by commits, so once the emit rate passes
what commits sustain, the queue of appends grows and latency is queueing time. The executor
batches answer deltas (one append per ~50 ms), which keeps real runs far from these limits;
concurrent appends share one commit (group commit), and `StreamBatches` readers take a burst
of events as one message.
"""
    )
    return "\n".join(parts)


def _busy_at_the_aim(rows: list[dict[str, Any]]) -> str:
    """How busy the processes were at the aim's load: a process near a whole core (one
    Python thread's limit) sets the latency, whichever side it is on."""
    row = next((r for r in rows if r["subscribers"] == 100 and r["rate"] == 1000), None)
    if row is None:
        return ""
    names = {"bench": "the benchmark's process (producer and subscribers)", "server": "server"}
    parts = [
        f"{side}: "
        + ", ".join(
            f"{names[n]} {share * 100:.0f} %" for n, share in row[side]["busy_cores"].items()
        )
        for side in ("grpc", "bare grpc")
        if "busy_cores" in row.get(side, {})
    ]
    if not parts:
        return ""
    return (
        "\nShare of a core each process was busy at 100 subscribers and 1,000 events/s, from the "
        "first emit to the last delivery: " + "; ".join(parts) + ".\n"
    )


def sse_fanout(ctx: Context) -> str:
    figures = ctx.results.figures("sse_fanout")
    head = """### Through the gateway to SSE clients

```sh
.venv/bin/python -m bench.suites.sse_fanout --clients 1 100 1000
```

The five processes on the embedded defaults (SQLite, in-process hot tier). N SSE clients
(raw sockets, one asyncio process) follow one workflow at `GET /api/v1/stream/sse`; the
producer appends to the events service over one `AppendStream` call, as the executor does.
The clients share one
`EventService.StreamBatches` call and each event's rendered frame (`gateway/fanout.py`).
*Throughput*: batches of 50 events back to back; events/s is events until every client has
them all, frames/s is that × clients. *Latency*: one event per append at a fixed rate (not
waiting for the previous one), from just before the append to the client holding the bytes:
it includes the commit, the events service, the gateway and the clients' own event loop,
which shares the two cores with the services.
"""
    if figures is None:
        return head + "\n" + missing("sse_fanout")
    throughput = [
        [
            f"{r['clients']:,}",
            f"{r['events']:,}",
            number(r["appended_per_s"]),
            number(r["events_per_s"]),
            number(r["frames_per_s"]),
        ]
        for r in figures["throughput"]
    ]
    latency = [
        [
            f"{r['clients']:,}",
            f"{r['rate']:,.0f} ({number(r['reached_per_s'])})",
            *(number(r["latency_ms"][q], 1) for q in ("p50", "p95", "p99")),
            f"{r['delivered']:,}/{r['expected']:,}",
        ]
        for r in figures["latency"]
    ]
    chart = ctx.chart(
        "sse_fanout", charts.sse_fanout, figures, "SSE fan-out throughput and latency"
    )
    return f"""{head}
{table(["clients", "events", "appended/s", "events/s to all", "frames/s"], throughput)}

{table(["clients", "events/s (reached)", "p50 ms", "p95 ms", "p99 ms", "delivered"], latency)}

{chart}

The gateway reads each event once and renders its frame once. While a workflow keeps
changing, its clients are woken in paced rounds (`SHUTTLE_SSE_FANOUT_SECONDS_PER_CLIENT`,
0.2 ms per client apart, at most 0.1 s; see the gRPC latency above), each taking what came
meanwhile as one write, so 1,000 events/s to 100 clients, or 100 events/s to 1,000, do not
outrun the CPU. What pacing costs is a few milliseconds at middling loads, where
every change could still have been sent on its own; what still grows with clients is
writing the shared bytes to each socket, in one Python process.
"""


def sse_idle(ctx: Context) -> str:
    figures = ctx.results.figures("sse_idle")
    head = """### Idle SSE connections per gateway process

```sh
.venv/bin/python -m bench.suites.sse_idle --connections 5000
```

The benchmark lifts its open-file limit to the hard limit (the services inherit it), then opens
N SSE streams on one workflow in five steps (raw sockets, one asyncio process), reading the
gateway's and the events service's resident memory and open sockets after each step. With all
open it reads both processes' CPU over five idle seconds, then appends one event and times its
arrival at every client.
"""
    if figures is None:
        return head + "\n" + missing("sse_idle")
    per = figures["per_connection_bytes"]
    sockets = figures["sockets_added"]
    cpu = figures["idle_cpu"]
    rows = [
        [
            name,
            number(figures["settled"][name]["rss"] / 2**20, 1),
            number(per[name] / 1024, 1),
            f"+{sockets[name]:,}",
            f"{cpu[name] * 100:.1f} %",
        ]
        for name in ("gateway", "events")
    ]
    q = figures["event_latency_ms"]
    total = figures["connections"]
    bare_grpc = figures.get("bare_grpc_stream_bytes", float("nan")) / 1024
    bare_sse = figures.get("bare_sse_stream_bytes", float("nan")) / 1024
    gateway_kb = per["gateway"] / 1024
    chart = ctx.chart("sse_idle", charts.sse_idle, figures, "memory by idle SSE connections")
    return f"""{head}
{table(["process", f"RSS, {total:,} open (MB)", "KB each", "sockets", "CPU idle"], rows)}

{chart}

Opening {total:,} streams took {number(figures["opening_s"], 1)} s. One event appended afterwards
reached {figures["event_reached"]:,} of {total:,} clients: p50 {number(q["p50"], 1)} ms, p95
{number(q["p95"], 1)} ms, last {number(q["max"], 1)} ms.

What a connection costs: in the gateway, a client socket, an SSE response with its tasks
(sse-starlette runs the stream, a ping every 15 s and a disconnect listener side by side), and
a watcher of the workflow's feed. All clients of one workflow in a gateway process share one
`EventService.StreamBatches` call (`gateway/fanout.py`), so the events service holds one
server stream, with one reader waiting on the in-process hot tier, however many clients
there are. A bare Starlette app holding as many idle sse-starlette streams under uvicorn,
measured in the same run, cost {number(bare_sse, 1)} KB each (`bench/peers/sse_server.py`):
of the gateway's {number(gateway_kb, 1)} KB, the other {number(gateway_kb - bare_sse, 1)} KB
are FastAPI's request handling, the tenancy check and workflow lookup before the stream, and
the watcher's generator. Were each client to hold its own upstream call instead, that call
alone would add {number(bare_grpc, 1)} KB (idle `EventService.Stream` calls held by a bare
`grpc.aio` client, `bench/peers/grpc_stream_holder.py`).
With the Redis hot tier (not measured here) each waiting reader in the events service (here:
one per workflow and gateway process) also wakes once per `SHUTTLE_EVENTS_POLL_SECONDS` (1 s)
without news, to read the workflow's row in SQL.
"""
