"""Every side the ReAct benchmarks measured is named in the report, the persisting peers with
the rest, from the results `--quick` saved under results/."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.report.markdown import number
from bench.report.sides import PERSISTING_PEERS, SIDES
from tests.bench.test_report import RESULTS, render


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> str:
    code, doc, _ = render(tmp_path_factory.mktemp("report"))
    assert code == 0
    return doc.read_text()


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    return text[start : text.index("\n## ", start + 1)]


def test_the_saved_figures_hold_every_persisting_peer() -> None:
    overhead = json.loads((RESULTS / "react_overhead.json").read_text())["figures"]
    concurrency = json.loads((RESULTS / "react_concurrency.json").read_text())["figures"]

    assert set(PERSISTING_PEERS) <= set(overhead["per_iteration_ms"])
    assert overhead["ks"] == [1, 5, 20, 50]
    assert [r["count"] for r in concurrency["rows"]] == [1, 20, 100]
    for row in concurrency["rows"]:
        assert set(PERSISTING_PEERS) <= set(row)


def test_every_side_of_the_overhead_table_and_its_fit_is_named(text: str) -> None:
    overhead = json.loads((RESULTS / "react_overhead.json").read_text())["figures"]
    per_iteration = overhead["per_iteration_ms"]
    body = section(text, "## ReAct engine overhead per iteration")
    header = next(line for line in body.splitlines() if line.startswith("| K tool iterations"))

    for side in per_iteration:
        assert f"{SIDES[side]} ms/iter" in header
        fit = overhead["fit"][side]
        assert f"| {SIDES[side]} | {number(fit['per_iteration_ms'], 2)} |" in body
    for k in overhead["ks"]:
        row = next(line for line in body.splitlines() if line.startswith(f"| {k} | "))
        cells = row.split(" | ")
        for index, side in enumerate(per_iteration, start=1):
            assert cells[index].startswith(number(per_iteration[side][str(k)]["median"], 2))


def test_every_side_of_concurrent_runs_is_a_row_against_its_own_model_calls(text: str) -> None:
    concurrency = json.loads((RESULTS / "react_concurrency.json").read_text())["figures"]
    body = section(text, "## Concurrent runs against a slow model")

    for row in concurrency["rows"]:
        for side in SIDES:
            if side not in row:
                continue
            ideal = row[side]["ideal_s"]
            x_ideal = row[side]["x_ideal"]["median"]
            assert f"| {row['count']:,} | {row['k']} | {number(ideal, 2)} | {SIDES[side]} |" in body
            assert f"| {number(x_ideal, 2)} |" in body
    # The agents make no synthesis call: one model call fewer than Shuttle's run.
    hundred = next(r for r in concurrency["rows"] if r["count"] == 100)
    assert hundred["agents_sqlite"]["ideal_s"] < hundred["shuttle"]["ideal_s"]
    assert "OpenAI Agents SDK + SQLiteSession, " in body  # its CPU at 100 runs


def test_the_react_aim_is_flat_from_k_5_whatever_a_single_iteration_adds(tmp_path: Path) -> None:
    """A run of one iteration is mostly its fixed part: it neither makes the larger Ks look
    flat nor, when it happens to add less, makes them look steep."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    saved = results / "react_overhead.json"
    document = json.loads(saved.read_text())
    per_iteration = document["figures"]["per_iteration_ms"]
    for k, added in {1: 0.5, 5: 4.5, 20: 3.2, 50: 2.9}.items():
        loop = per_iteration["client_loop"][str(k)]["median"]
        per_iteration["shuttle"][str(k)]["median"] = loop + added
    saved.write_text(json.dumps(document))

    code, doc, _ = render(tmp_path, results)

    assert code == 0
    row = next(line for line in doc.read_text().splitlines() if line.startswith("| ReAct"))
    assert row.endswith("**met** |")
