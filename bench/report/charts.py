"""PNG charts of the saved figures (matplotlib, Agg canvas: no display needed)."""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .aims import REACT_BASELINES
from .sides import CONCURRENCY_SIDES

COLOURS = {
    "shuttle": "#1f6feb",
    "shuttle_log": "#54aeff",
    "hops": "#2da44e",
    "bare": "#8b949e",
    "client_loop": "#424a53",
    "langgraph": "#d29922",
    "langgraph_sqlite": "#e3b341",
    "langgraph_postgres": "#9a6700",
    "agents_sqlite": "#bf3989",
    "gateway": "#1f6feb",
    "events": "#d29922",
    "executor": "#2da44e",
    "tools": "#8250df",
    "planner": "#cf222e",
}
LABELS = {
    "shuttle": "Shuttle, Run",
    "shuttle_log": "Shuttle, StartRun + StreamBatches",
    "hops": "the same hops, bare grpc.aio",
    "bare": "bare openai loop",
    "client_loop": "bare loop, Shuttle's model client",
    "langgraph": "LangGraph",
    "langgraph_sqlite": "LangGraph + SQLite checkpointer",
    "langgraph_postgres": "LangGraph + Postgres checkpointer",
    "agents_sqlite": "Agents SDK + SQLiteSession",
}


MANY_SIDES = 6
"""More sides than this get a wider chart with its legend beside the plot."""


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    # No timestamp or version in the file, so an unchanged chart is an unchanged file.
    figure.savefig(path, dpi=110, metadata={"Software": None})
    return path


def _grouped_bars(
    axes: Axes,
    groups: Sequence[str],
    series: dict[str, list[float]],
    errors: dict[str, tuple[list[float], list[float]]] | None = None,
) -> None:
    width = 0.8 / max(len(series), 1)
    for index, (name, values) in enumerate(series.items()):
        positions = [g + (index - (len(series) - 1) / 2) * width for g in range(len(groups))]
        low_high = errors.get(name) if errors else None
        axes.bar(
            positions,
            values,
            width,
            label=LABELS.get(name, name),
            color=COLOURS.get(name),
            yerr=[low_high[0], low_high[1]] if low_high else None,
            capsize=3,
        )
    axes.set_xticks(range(len(groups)), list(groups))
    axes.legend(frameon=False)
    axes.grid(axis="y", alpha=0.3)


def _legend(axes: Axes, sides: int) -> None:
    """Inside the plot for a few sides; beside it for many, where it would cover the bars."""
    if sides <= MANY_SIDES:
        axes.legend(frameon=False)
    else:
        axes.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _below_above(
    spreads: list[dict[str, float]], low: str, high: str
) -> tuple[list[float], list[float]]:
    return (
        [max(0.0, s["median"] - s[low]) for s in spreads],
        [max(0.0, s[high] - s["median"]) for s in spreads],
    )


def react_overhead(figures: dict[str, Any], path: Path) -> Path:
    ks = [str(k) for k in figures["ks"]]
    per_iteration: dict[str, dict[str, dict[str, float]]] = figures["per_iteration_ms"]
    figure = Figure(figsize=(7 if len(per_iteration) <= MANY_SIDES else 10, 4.5))
    axes = figure.add_subplot()
    series = {name: [by_k[k]["median"] for k in ks] for name, by_k in per_iteration.items()}
    errors = {
        name: _below_above([by_k[k] for k in ks], "p25", "p75")
        for name, by_k in per_iteration.items()
    }
    _grouped_bars(axes, [f"K = {k}" for k in ks], series, errors)
    baseline = next((name for name in REACT_BASELINES if name in series), None)
    if baseline is not None:
        # The aim is what Shuttle adds over the model call at the largest K: that loop + 3 ms.
        last = len(ks) - 1
        axes.hlines(
            series[baseline][last] + 3.0,
            last - 0.45,
            last + 0.45,
            colors="#cf222e",
            linestyles="--",
            linewidth=1,
            label=f"aim: {LABELS[baseline]} + 3 ms",
        )
    else:
        axes.axhline(3.0, color="#cf222e", linestyle="--", linewidth=1, label="aim 3 ms")
    _legend(axes, len(series))
    axes.set_ylabel("ms per tool iteration (median, p25–p75)")
    axes.set_title("Per-iteration cost, zero-latency model")
    return _save(figure, path)


def react_concurrency(figures: dict[str, Any], path: Path) -> Path:
    rows: list[dict[str, Any]] = figures["rows"]
    sides = [s for s in CONCURRENCY_SIDES if all(s in r for r in rows)]
    figure = Figure(figsize=(7 if len(sides) <= MANY_SIDES else 10, 4.5))
    axes = figure.add_subplot()
    groups = [f"{r['count']:,} run{'s' if r['count'] != 1 else ''}, K = {r['k']}" for r in rows]
    series = {s: [r[s]["x_ideal"]["median"] for r in rows] for s in sides}
    errors = {s: _below_above([r[s]["x_ideal"] for r in rows], "low", "high") for s in sides}
    _grouped_bars(axes, groups, series, errors)
    axes.axhline(1.0, color="black", linewidth=1)
    axes.axhline(1.2, color="#cf222e", linestyle="--", linewidth=1, label="aim 1.2×")
    axes.set_ylabel("wall time ÷ ideal (median, min–max)")
    axes.set_title("Concurrent runs, 200 ms per model call")
    _legend(axes, len(sides))
    return _save(figure, path)


def sse_fanout(figures: dict[str, Any], path: Path) -> Path:
    figure = Figure(figsize=(10, 4))
    left, right = figure.subplots(1, 2)
    throughput: list[dict[str, Any]] = figures["throughput"]
    labels = [f"{r['clients']:,}" for r in throughput]
    left.bar(labels, [r["frames_per_s"] for r in throughput], color=COLOURS["gateway"])
    left.set_xlabel("SSE clients on one workflow")
    left.set_ylabel("events delivered per second, all clients")
    left.set_title("Gateway SSE fan-out throughput")
    left.grid(axis="y", alpha=0.3)
    latency: list[dict[str, Any]] = figures["latency"]
    groups = [f"{r['clients']:,} @ {r['rate']:,.0f}/s" for r in latency]
    series = {q: [r["latency_ms"][q] for r in latency] for q in ("p50", "p95", "p99")}
    _grouped_bars(right, groups, series)
    right.set_yscale("log")
    right.axhline(10.0, color="#cf222e", linestyle="--", linewidth=1)
    right.set_ylabel("append → client, ms (log)")
    right.set_title("Latency by clients @ events/s")
    right.tick_params(axis="x", labelsize=8)
    return _save(figure, path)


def _memory_lines(
    axes: Axes, steps: list[dict[str, Any]], x_key: str, names: Sequence[str], rss: str
) -> None:
    xs = [s[x_key] for s in steps]
    for name in names:
        base = _rss(steps[0], name, rss)
        axes.plot(
            xs,
            [(_rss(s, name, rss) - base) / 2**20 for s in steps],
            marker="o",
            label=name,
            color=COLOURS.get(name),
        )
    axes.grid(alpha=0.3)
    axes.legend(frameon=False)


def _rss(step: dict[str, Any], name: str, rss: str) -> float:
    value = step[rss][name] if rss == "rss" else step[name]["rss"]
    return float(value)


def sse_idle(figures: dict[str, Any], path: Path) -> Path:
    figure = Figure(figsize=(7, 4))
    axes = figure.add_subplot()
    _memory_lines(axes, figures["steps"], "connections", ["gateway", "events"], "per-process")
    axes.set_xlabel("idle SSE connections")
    axes.set_ylabel("resident memory added, MB")
    axes.set_title("Idle SSE streams: memory by process")
    return _save(figure, path)


def run_memory(figures: dict[str, Any], path: Path) -> Path:
    figure = Figure(figsize=(7, 4))
    axes = figure.add_subplot()
    names = list(figures["steps"][0]["rss"])
    _memory_lines(axes, figures["steps"], "runs", names, "rss")
    axes.set_xlabel("runs held mid-iteration")
    axes.set_ylabel("resident memory added, MB")
    axes.set_title("In-flight runs: memory by process")
    return _save(figure, path)


def llm_overhead(figures: dict[str, Any], path: Path) -> Path:
    rows: list[dict[str, Any]] = figures["rows"]
    figure = Figure(figsize=(7, 4))
    axes = figure.add_subplot()
    groups = [f"{r['messages']} messages" for r in rows]
    series = {
        "openai create": [r["openai_ms"]["median"] for r in rows],
        "shuttle": [r["shuttle_ms"]["median"] for r in rows],
    }
    errors = {
        "openai create": _below_above([r["openai_ms"] for r in rows], "p25", "p75"),
        "shuttle": _below_above([r["shuttle_ms"] for r in rows], "p25", "p75"),
    }
    _grouped_bars(axes, groups, series, errors)
    axes.set_ylabel("client ms per call (median, p25–p75)")
    axes.set_title("LLM client time per call vs history length")
    return _save(figure, path)
