"""The benchmark report renders from saved results: markdown, charts, and the aims' verdicts.

The results under results/ were saved by the real benchmarks (`python -m bench --quick`);
events_latency-pg and events_latency-sequential are left out on purpose, to show a missing
benchmark is named rather than breaking the report.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.report.__main__ import main

RESULTS = Path(__file__).parent / "results"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def render(tmp_path: Path, results: Path = RESULTS) -> tuple[int, Path, Path]:
    doc, images = tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "img"
    code = main(["--results", str(results), "--doc", str(doc), "--images", str(images)])
    return code, doc, images


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One render shared by the tests that only read it (drawing the charts takes seconds)."""
    code, doc, images = render(tmp_path_factory.mktemp("report"))
    assert code == 0
    return doc, images


def test_every_section_and_chart_is_rendered(rendered: tuple[Path, Path]) -> None:
    doc, images = rendered
    text = doc.read_text()
    for heading in (
        "## Aims",
        "## LLM client overhead vs. history length",
        "## ReAct engine overhead per iteration",
        "## Concurrent runs against a slow model",
        "## Memory per in-flight run",
        "## One executor against three",
        "## One task end to end",
        "### Append throughput",
        "### Through the gateway to SSE clients",
        "### Idle SSE connections per gateway process",
        "## Reproducing",
    ):
        assert heading in text, heading
    # Runs spread over the executors, one count each.
    assert "| 3 | 30.3 | 35.7 | " in text and "| 10, 10, 10 |" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert sorted(Path(link).name for link in links) == sorted(p.name for p in images.iterdir())
    assert len(links) == 6
    for link in links:
        chart = doc.parent / link
        assert chart.read_bytes().startswith(PNG_MAGIC), link
        assert chart.stat().st_size > 5_000, f"{link} looks empty"


def test_the_machine_its_load_and_the_quick_sizes_are_stated(rendered: tuple[Path, Path]) -> None:
    doc, _ = rendered
    text = doc.read_text()
    machine = json.loads((RESULTS / "llm_overhead.json").read_text())["machine"]

    assert f"{machine['cpus']} CPUs" in text
    assert f"Python {machine['python']}" in text
    assert "`--quick` sizes" in text
    # The saved results were measured on a busy machine, and the report must say so.
    assert machine["load_average"][0] > machine["cpus"]
    assert "Other work kept this machine busy" in text


def test_the_machine_speed_is_stated_when_measured(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    for index, saved in enumerate(sorted(results.glob("*.json"))):
        document = json.loads(saved.read_text())
        document["machine"]["reference_loop_ms"] = 120.0 + index
        saved.write_text(json.dumps(document))
    last = 120 + len(list(results.glob("*.json"))) - 1

    code, doc, _ = render(tmp_path, results)

    assert code == 0
    text = " ".join(doc.read_text().split())
    assert f"2,000,000 integer additions in plain Python took 120\N{EN DASH}{last} ms" in text


def test_aims_are_judged_from_the_figures(rendered: tuple[Path, Path]) -> None:
    doc, _ = rendered
    rows = {
        line.split(" | ")[0].removeprefix("| "): line
        for line in doc.read_text().splitlines()
        if line.startswith("| ") and "**" in line
    }
    memory = json.loads((RESULTS / "run_memory.json").read_text())["figures"]
    executor_kb = memory["per_run_bytes"]["executor"] / 1024
    expected = "**met**" if executor_kb <= 100 else "**not met**"

    assert f"executor {executor_kb:,.1f} KB" in rows["≤ 100 KB per in-flight run (executor)"]
    assert rows["≤ 100 KB per in-flight run (executor)"].endswith(f"{expected} |")
    # 500 idle connections in the quick results fall short of 5,000.
    assert rows["≥ 5,000 idle SSE connections per gateway process"].endswith("**not met** |")


def test_the_cpu_per_run_is_reported_beside_the_hops_peer(rendered: tuple[Path, Path]) -> None:
    doc, _ = rendered
    text = doc.read_text()
    figures = json.loads((RESULTS / "run_cpu.json").read_text())["figures"]
    ours, hops = figures["fit"]["shuttle"], figures["fit"]["hops"]

    for name, label in (("executor", "executor"), ("all", "all")):
        row = (
            f"| {label} | {ours[name]['fixed_ms']:,.1f} | {hops[name]['fixed_ms']:,.1f} | "
            f"{ours[name]['per_iteration_ms']:,.2f} | {hops[name]['per_iteration_ms']:,.2f} |"
        )
        assert row in text, row
    section = text.split("Where the time goes: CPU.")[1].split("Wall time per run")[0]
    assert "| planner |" not in section  # a process with no CPU in such runs is left out
    # A hundred runs at the concurrent runs' K, from the fit.
    (row,) = [
        r
        for r in json.loads((RESULTS / "react_concurrency.json").read_text())["figures"]["rows"]
        if r["count"] == 100
    ]
    hundred = (ours["all"]["fixed_ms"] + row["k"] * ours["all"]["per_iteration_ms"]) / 10
    flat = " ".join(text.split())
    assert f"{hundred:,.1f} s of CPU, {hundred / 2:,.1f} s of both cores" in flat
    # What Shuttle spends beyond the peer, once per run, and the events service's share.
    beyond = ours["all"]["fixed_ms"] - hops["all"]["fixed_ms"]
    events = ours["events"]["fixed_ms"] - hops["events"]["fixed_ms"]
    assert f"a run costs {beyond:,.1f} ms of CPU once" in flat
    assert f"Once per run, {events:,.1f} ms of it is the events service's" in flat


def test_both_ways_of_reading_a_run_and_the_cpu_of_each_process_are_reported(
    rendered: tuple[Path, Path],
) -> None:
    doc, _ = rendered
    text = " ".join(doc.read_text().split())
    overhead = json.loads((RESULTS / "react_overhead.json").read_text())["figures"]
    per_iteration = overhead["per_iteration_ms"]
    added = [
        per_iteration["shuttle_log"][str(k)]["median"]
        - per_iteration["client_loop"][str(k)]["median"]
        for k in overhead["ks"]
    ]
    assert (
        "read with StartRun + StreamBatches, added " + " / ".join(f"{a:,.2f}" for a in added)
        in text
    )
    assert "| Shuttle, `StartRun` + `StreamBatches` \u2212 model-client loop |" in text
    layout = [
        per_iteration["hops"][str(k)]["median"] - per_iteration["client_loop"][str(k)]["median"]
        for k in overhead["ks"]
    ]
    assert (
        "the same hops on bare grpc.aio, added " + " / ".join(f"{a:,.2f}" for a in layout) in text
    )
    assert "| the same hops on bare grpc.aio |" in text  # the fit's row

    concurrency = json.loads((RESULTS / "react_concurrency.json").read_text())["figures"]
    hundred = next(r for r in concurrency["rows"] if r["count"] == 100)
    trial = hundred["shuttle_log"]["trials"][-1]
    executor = trial["cpu_s"]["executor"]
    share = executor / trial["wall_s"] * 100
    assert f"executor {executor:,.2f} s ({share:.0f} % of a core)" in text
    assert f"{hundred['shuttle_log']['x_ideal']['median']:,.2f}\u00d7 with StartRun" in text
    lean_peer = hundred["client_loop"]["x_ideal"]["median"]
    assert f"on Shuttle's model client {lean_peer:,.2f}\u00d7" in text


def _react_verdict(tmp_path: Path, added_ms: dict[int, float]) -> str:
    """The ReAct aim's row, rendered from the saved results with Shuttle's medians over Run
    set to the model-client loop's plus `added_ms` at each K."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    saved = results / "react_overhead.json"
    document = json.loads(saved.read_text())
    per_iteration = document["figures"]["per_iteration_ms"]
    for k, added in added_ms.items():
        loop = per_iteration["client_loop"][str(k)]["median"]
        per_iteration["shuttle"][str(k)]["median"] = loop + added
    saved.write_text(json.dumps(document))
    code, doc, _ = render(tmp_path, results)
    assert code == 0
    return next(line for line in doc.read_text().splitlines() if line.startswith("| ReAct"))


@pytest.mark.parametrize(
    ("added_ms", "verdict"),
    [
        # The fixed part of a run spread over few iterations: dearer at K = 5, met at 50.
        ({5: 4.5, 20: 3.2, 50: 2.9}, "**met**"),
        ({5: 4.5, 20: 3.6, 50: 3.1}, "**not met**"),
        # Under 3 ms at K = 50 but growing with K is not flat.
        ({5: 1.0, 20: 2.0, 50: 2.9}, "**not met**"),
    ],
)
def test_the_react_aim_is_judged_at_k_50_beside_the_loop_on_the_same_model_client(
    tmp_path: Path, added_ms: dict[int, float], verdict: str
) -> None:
    row = _react_verdict(tmp_path, added_ms)
    assert "beside the loop on Shuttle's model client" in row
    assert f"(added {added_ms[50]:,.2f})" in row
    assert row.endswith(f"{verdict} |")


def test_how_busy_each_process_was_at_the_latency_aim_is_reported(
    rendered: tuple[Path, Path],
) -> None:
    doc, _ = rendered
    text = " ".join(doc.read_text().split())
    figures = json.loads((RESULTS / "events_latency-sqlite.json").read_text())["figures"]
    row = next(r for r in figures["rows"] if r["subscribers"] == 100 and r["rate"] == 1000)
    busy = row["grpc"]["busy_cores"]
    assert (
        "grpc: the benchmark's process (producer and subscribers) "
        f"{busy['bench'] * 100:.0f} %, server {busy['server'] * 100:.0f} %"
    ) in text


def test_a_benchmark_without_results_is_named_not_fatal(tmp_path: Path) -> None:
    partial = tmp_path / "results"
    shutil.copytree(RESULTS, partial)
    (partial / "sse_idle.json").unlink()

    code, doc, images = render(tmp_path, partial)

    assert code == 0
    text = doc.read_text()
    assert "*Not measured in this run (`python -m bench --only sse_idle`).*" in text
    assert "*Not measured in this run (`python -m bench --only events_latency-pg`).*" in text
    assert not (images / "sse_idle.png").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "is not valid JSON"), ('{"benchmark": "x"}', "is not a benchmark result")],
)
def test_a_broken_results_file_is_named_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    broken = tmp_path / "results"
    shutil.copytree(RESULTS, broken)
    (broken / "odd.json").write_text(content)

    code, doc, _ = render(tmp_path, broken)

    assert code == 2
    assert f"odd.json {message}" in capsys.readouterr().err
    assert not doc.exists()


def _with_other_work(tmp_path: Path, cpus_used: float) -> Path:
    """The saved results, each as `python -m bench` records them: with the CPU that processes
    outside the benchmark used while it ran (the load average stays the saved, high one)."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    for saved in results.glob("*.json"):
        document = json.loads(saved.read_text())
        document["machine"]["other_cpus"] = cpus_used
        saved.write_text(json.dumps(document))
    return results


@pytest.mark.parametrize(("cpus_used", "busy"), [(0.05, False), (1.5, True)])
def test_other_work_not_the_benchmarks_own_load_decides_whether_the_machine_was_busy(
    tmp_path: Path, cpus_used: float, busy: bool
) -> None:
    code, doc, _ = render(tmp_path, _with_other_work(tmp_path, cpus_used))
    assert code == 0
    text = doc.read_text()
    assert ("Other work kept this machine busy" in text) is busy
    assert f"used {cpus_used:.2f}\N{EN DASH}{cpus_used:.2f} of the" in text


def test_a_tasks_cpu_and_post_are_reported_from_their_own_figures(
    rendered: tuple[Path, Path],
) -> None:
    doc, _ = rendered
    text = " ".join(doc.read_text().split())
    figures = json.loads((RESULTS / "end_to_end.json").read_text())["figures"]
    cpu = figures["cpu_ms_per_task"]

    assert f"gateway {cpu['gateway']:,.1f}" in text
    assert f"executor {cpu['executor']:,.1f}" in text
    assert f"{sum(cpu.values()):,.1f} ms in all" in text
    assert "planner 0.0" not in text  # no CPU of its own in such tasks
    posted = figures["posted_ms"]["p50"]
    assert f"| of which until `POST` is answered | {posted:,.1f} ms |" in text
