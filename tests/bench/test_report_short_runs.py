"""The short-run aims are judged from the saved figures, side by side: each ratio against its
peer at every K, the hops peer's floor where one is missed, and a missing benchmark or count
named as not measured."""

from __future__ import annotations

import json
from typing import Any

from bench.report.load import Results
from bench.report.markdown import number
from bench.report.short_run_aims import HOPS_RATIO_AIM, judge
from tests.bench.test_report import RESULTS


def saved(name: str) -> dict[str, Any]:
    figures: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())["figures"]
    return figures


def medians(figures: dict[str, Any], side: str) -> dict[int, float]:
    return {int(k): v["median"] for k, v in figures["per_iteration_ms"][side].items()}


def test_per_iteration_aims_compare_every_k_with_the_peer() -> None:
    figures = saved("react_overhead")
    ours = medians(figures, "shuttle")
    hops = medians(figures, "hops")
    judgements = judge(Results.read(RESULTS))
    for judgement, peer in zip(judgements[:2], ("langgraph_sqlite", "bare"), strict=True):
        theirs = medians(figures, peer)
        missed = [k for k in sorted(ours) if ours[k] > theirs[k]]
        assert judgement.met is (not missed)
        for k in ours:
            assert f"K={k}: {number(ours[k], 2)} vs {number(theirs[k], 2)} ms" in judgement.measured
        # The floor is given exactly where the aim is missed.
        for k in ours:
            assert (f"K={k}: {number(hops[k], 2)} ms" in judgement.why) is (k in missed)


def test_the_largest_k_is_judged_against_the_hops_peer() -> None:
    figures = saved("react_overhead")
    ours, hops = medians(figures, "shuttle"), medians(figures, "hops")
    k = max(ours)
    (judgement,) = [j for j in judge(Results.read(RESULTS)) if "hops peer" in j.aim]
    assert judgement.met is (ours[k] / hops[k] <= HOPS_RATIO_AIM)
    assert f"K={k}: {number(ours[k], 2)} vs {number(hops[k], 2)} ms" in judgement.measured


def test_a_missed_aim_says_where_the_cpu_goes() -> None:
    """The fixed cost and the largest K against the hops peer, from run_cpu's fit; the task
    end to end from its CPU per process; concurrent runs from the CPU of their last trial."""
    fit = saved("run_cpu")["fit"]
    judgements = {j.aim: j for j in judge(Results.read(RESULTS))}
    by_start = {aim.split(",")[0].split(" ≤")[0]: j for aim, j in judgements.items()}

    fixed = by_start["what every run pays once"]
    assert fixed.met is False
    ours, hops = fit["shuttle"], fit["hops"]
    assert f"CPU once per run {number(ours['all']['fixed_ms'], 1)} ms" in fixed.why
    assert f"executor {number(ours['executor']['fixed_ms'], 1)}" in fixed.why
    assert f"against the hops peer's {number(hops['all']['fixed_ms'], 1)}" in fixed.why

    largest = by_start["at the largest K"]
    if largest.met is False:
        per_round = number(ours["all"]["per_iteration_ms"], 2)
        assert f"CPU per tool round {per_round} ms" in largest.why
    else:
        assert largest.why == ""

    task = by_start["a one-tool task end to end"]
    cpu = saved("end_to_end")["cpu_ms_per_task"]
    total = sum(ms for ms in cpu.values() if ms >= 0.05)
    assert task.met is False
    assert f"CPU per task {number(total, 1)} ms" in task.why
    assert f"gateway {number(cpu['gateway'], 1)}" in task.why

    concurrent = by_start["at 100 and 1"]
    hundred = {r["count"]: r for r in saved("react_concurrency")["rows"]}[100]
    if concurrent.met is False:
        trial = hundred["shuttle"]["trials"][-1]
        per_run = sum(trial["cpu_s"].values()) / 100 * 1000
        assert f"at 100, CPU per run {number(per_run, 1)} ms" in concurrent.why


def test_a_count_that_was_not_run_is_named() -> None:
    rows = {r["count"]: r for r in saved("react_concurrency")["rows"]}
    assert 1000 not in rows  # the quick results stop at 100
    (judgement,) = [j for j in judge(Results.read(RESULTS)) if "concurrent" in j.aim]
    assert "not run at 1,000" in judgement.measured
    hundred = rows[100]
    missed = hundred["shuttle"]["x_ideal"]["median"] > hundred["bare"]["x_ideal"]["median"]
    # A miss at 100 is a miss whatever 1,000 would show; otherwise it is not measured yet.
    assert judgement.met is (False if missed else None)


def test_without_the_benchmarks_nothing_is_judged() -> None:
    judgements = judge(Results())
    assert [j.met for j in judgements] == [None] * len(judgements)
    assert all(j.measured == "—" for j in judgements)
