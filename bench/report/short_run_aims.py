"""The aims for short runs: Shuttle beside the in-process frameworks and the bare loop, as
ratios measured side by side in one run, and where one is missed, what explains it.

Two things do. The floor is the hops peer (`bench/peers/hops.py`): the same crossings between
processes as a Shuttle run (tool calls, Appends, the log relayed over Run) on bare grpc.aio
servers; whatever of a miss the hops peer already shows is the layout's cost, not the
engine's. The rest is CPU: on two cores every process of a run takes its turn, so the CPU a
run costs, by process, says where the time beyond the floor goes.
"""

# ruff: noqa: RUF001  (the rendered markdown uses typographic multiplication and dashes)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .aims import Judgement
from .load import Results
from .markdown import by_process, number, table, verdict
from .sections_cpu import cpu_lines, describe

FIXED_MS_AIM = 5.0
HOPS_RATIO_AIM = 1.15
END_TO_END_RATIO_AIM = 2.0
CONCURRENT_COUNTS = (100, 1000)


def _medians(figures: dict[str, Any], side: str) -> dict[int, float]:
    return {int(k): v["median"] for k, v in figures["per_iteration_ms"][side].items()}


def _ratio(ours: float, theirs: float) -> str:
    return f"{number(ours / theirs, 2)}×"


def _per_iteration_against(peer: str, label: str) -> Callable[[Results], Judgement]:
    def judge(results: Results) -> Judgement:
        aim = f"per iteration, at every K, no more than {label}"
        figures = results.figures("react_overhead")
        if figures is None or peer not in figures["per_iteration_ms"]:
            return Judgement(aim, "—", None)
        ours, theirs = _medians(figures, "shuttle"), _medians(figures, peer)
        ks = sorted(ours)
        measured = "; ".join(
            f"K={k}: {number(ours[k], 2)} vs {number(theirs[k], 2)} ms "
            f"({_ratio(ours[k], theirs[k])})"
            for k in ks
        )
        missed = [k for k in ks if ours[k] > theirs[k]]
        return Judgement(aim, measured, not missed, _hops_floor(figures, missed, theirs))

    return judge


def _hops_floor(figures: dict[str, Any], ks: list[int], theirs: dict[int, float]) -> str:
    if not ks or "hops" not in figures["per_iteration_ms"]:
        return ""
    hops = _medians(figures, "hops")
    return "the hops peer alone: " + "; ".join(
        f"K={k}: {number(hops[k], 2)} ms ({_ratio(hops[k], theirs[k])})" for k in ks
    )


def _fixed_per_run(results: Results) -> Judgement:
    aim = f"what every run pays once ≤ {number(FIXED_MS_AIM)} ms (fit of run time against K)"
    figures = results.figures("react_overhead")
    fit = figures.get("fit", {}) if figures else {}
    if "shuttle" not in fit:
        return Judgement(aim, "—", None)
    fixed = fit["shuttle"]["fixed_ms"]
    met = fixed <= FIXED_MS_AIM
    why = []
    if not met:
        if "hops" in fit:
            why.append(f"the hops peer pays {number(fit['hops']['fixed_ms'], 1)} ms once")
        why.append(_cpu_against_hops(results, "fixed_ms", "CPU once per run"))
    return Judgement(aim, f"{number(fixed, 1)} ms", met, "; ".join(w for w in why if w))


def _cpu_against_hops(results: Results, key: str, label: str) -> str:
    """`label`: Shuttle's processes against the hops peer's, from `run_cpu`'s fit."""
    figures = results.figures("run_cpu")
    if figures is None:
        return ""
    ours, hops = cpu_lines(figures, "shuttle"), cpu_lines(figures, "hops")
    if "all" not in ours or "all" not in hops:
        return ""
    digits = 1 if key == "fixed_ms" else 2
    return (
        f"{label} {number(ours['all'][key], digits)} ms ({describe(ours, key, digits)}) "
        f"against the hops peer's {number(hops['all'][key], digits)} "
        f"({describe(hops, key, digits)})"
    )


def _k50_against_hops(results: Results) -> Judgement:
    aim = f"at the largest K, per iteration ≤ {number(HOPS_RATIO_AIM, 2)}× the hops peer"
    figures = results.figures("react_overhead")
    if figures is None or "hops" not in figures["per_iteration_ms"]:
        return Judgement(aim, "—", None)
    ours, hops = _medians(figures, "shuttle"), _medians(figures, "hops")
    k = max(ours)
    ratio = ours[k] / hops[k]
    measured = (
        f"K={k}: {number(ours[k], 2)} vs {number(hops[k], 2)} ms ({_ratio(ours[k], hops[k])})"
    )
    met = ratio <= HOPS_RATIO_AIM
    why = "" if met else _cpu_against_hops(results, "per_iteration_ms", "CPU per tool round")
    return Judgement(aim, measured, met, why)


def _one_tool_task(results: Results) -> Judgement:
    aim = f"a one-tool task end to end ≤ {number(END_TO_END_RATIO_AIM)}× the bare loop (p50)"
    figures = results.figures("end_to_end")
    if figures is None:
        return Judgement(aim, "—", None)
    ours, bare = figures["shuttle_ms"]["p50"], figures["bare_ms"]["p50"]
    measured = f"{number(ours, 1)} vs {number(bare, 1)} ms ({_ratio(ours, bare)}), over the gateway"
    met = ours <= END_TO_END_RATIO_AIM * bare
    return Judgement(aim, measured, met, "" if met else _task_cpu(figures))


def _task_cpu(figures: dict[str, Any]) -> str:
    """The CPU a task costs Shuttle's processes: on two cores, a bound on its wall time."""
    cpu = figures.get("cpu_ms_per_task", {})
    if not cpu:
        return ""
    total = sum(cpu.values())
    posted = figures.get("posted_ms", {}).get("p50")
    answered = f"; the POST was answered after {number(posted, 1)} ms" if posted else ""
    return (
        f"CPU per task {number(total, 1)} ms ({by_process(cpu)}): on two cores at least "
        f"{number(total / 2, 1)} ms of wall time{answered}"
    )


def _concurrent_against_bare(results: Results) -> Judgement:
    counts = " and ".join(f"{c:,}" for c in CONCURRENT_COUNTS)
    aim = f"at {counts} concurrent runs, no more × ideal than the bare loop"
    figures = results.figures("react_concurrency")
    rows = {r["count"]: r for r in figures["rows"]} if figures else {}
    measured_rows = [rows[c] for c in CONCURRENT_COUNTS if c in rows and "bare" in rows[c]]
    if not measured_rows:
        return Judgement(aim, "—", None)
    parts, missed, why = [], False, []
    for row in measured_rows:
        ours = row["shuttle"]["x_ideal"]["median"]
        bare = row["bare"]["x_ideal"]["median"]
        parts.append(f"{row['count']:,}: {number(ours, 2)}× vs {number(bare, 2)}×")
        missed_here = ours > bare or row["shuttle"]["failed"] > 0
        missed = missed or missed_here
        if missed_here:
            why.append(_concurrent_cpu(row))
    unmeasured = [c for c in CONCURRENT_COUNTS if c not in rows]
    if unmeasured:
        parts.append("not run at " + ", ".join(f"{c:,}" for c in unmeasured))
    met = False if missed else (None if unmeasured else True)
    return Judgement(aim, "; ".join(parts), met, "; ".join(w for w in why if w))


def _concurrent_cpu(row: dict[str, Any]) -> str:
    """CPU per run in the last trial at this count, every process counted (the model and
    the benchmark's own too): Shuttle's side against the bare loop's."""
    per_run = {}
    for side in ("shuttle", "bare"):
        trial = row[side]["trials"][-1]
        if "cpu_s" not in trial:
            return ""
        per_run[side] = sum(trial["cpu_s"].values()) / row["count"] * 1000
    return (
        f"at {row['count']:,}, CPU per run {number(per_run['shuttle'], 1)} ms against the bare "
        f"loop's {number(per_run['bare'], 1)} (every process, the model's included)"
    )


JUDGES: tuple[Callable[[Results], Judgement], ...] = (
    _per_iteration_against("langgraph_sqlite", "LangGraph's agent with its SQLite checkpointer"),
    _per_iteration_against("bare", "the bare `openai` loop"),
    _one_tool_task,
    _fixed_per_run,
    _concurrent_against_bare,
    _k50_against_hops,
)


def judge(results: Results) -> list[Judgement]:
    return [each(results) for each in JUDGES]


def short_run_aims_table(results: Results) -> str:
    rows = [[j.aim, j.measured, verdict(j.met), j.why or "—"] for j in judge(results)]
    headers = ["aim", "measured in this run", "verdict", "where missed, why"]
    return table(headers, rows, "llll")
