"""The takeover section and its two aims, rendered from figures in the shape
`bench.suites.takeover` saves (it cannot measure before runs can be taken over)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.bench.test_report import RESULTS, render


def figures(kill_p99_ms: float, resumed_p99_ms: float) -> dict[str, object]:
    def summary(p50: float, p99: float) -> dict[str, float]:
        return {"p50": p50, "p95": p99, "p99": p99, "max": p99, "count": 20}

    return {
        "benchmark": "takeover",
        "command": "python -m bench.suites.takeover",
        "machine": json.loads((RESULTS / "replicas.json").read_text())["machine"],
        "settings": {"rounds": 20, "lease_s": 1.5, "poll_s": 0.2, "executors": 3},
        "figures": {
            "kill_to_resumed_ms": summary(2100.0, kill_p99_ms),
            "sigterm_to_release_ms": summary(40.0, 80.0),
            "sigterm_to_resumed_ms": summary(300.0, resumed_p99_ms),
        },
    }


@pytest.mark.parametrize(
    ("kill_p99_ms", "resumed_p99_ms", "verdicts"),
    [
        (3400.0, 900.0, ("**met**", "**met**")),
        (3600.0, 1200.0, ("**not met**", "**not met**")),
    ],
)
def test_the_takeover_figures_are_reported_and_judged(
    tmp_path: Path, kill_p99_ms: float, resumed_p99_ms: float, verdicts: tuple[str, str]
) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    (results / "takeover.json").write_text(json.dumps(figures(kill_p99_ms, resumed_p99_ms)))

    code, doc, _ = render(tmp_path, results)

    assert code == 0
    text = doc.read_text()
    assert "## A run taken over" in text
    assert f"| kill -9 → the resumed run's first event | 2.10 | {kill_p99_ms / 1000:.2f} |" in text
    assert "| SIGTERM → the lease released | 0.04 | 0.08 | < 1 s |" in text
    rows = [line for line in text.splitlines() if line.startswith("| a ")]
    killed = next(row for row in rows if "killed executor" in row)
    stopping = next(row for row in rows if "stopping executor" in row)
    assert killed.endswith(f"{verdicts[0]} |") and "with a 1.5 s lease" in killed
    assert stopping.endswith(f"{verdicts[1]} |")


def test_a_missing_takeover_result_is_named(tmp_path: Path) -> None:
    code, doc, _ = render(tmp_path)
    assert code == 0
    assert "python -m bench --only takeover" in doc.read_text()
