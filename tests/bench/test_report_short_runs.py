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
