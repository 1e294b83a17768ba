"""Render the fault tests' rows (var/chaos/*.json) as the table in docs/reliability.md.

python -m tests.chaos.report            # print the table
python -m tests.chaos.report --write    # replace the table in docs/reliability.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tests.chaos.harness import RESULTS_DIR
from tests.chaos.takeover_points import POINTS

TAKEOVER_ROWS = [
    f"takeover-{point}-{stack}" for stack in ("replicated", "embedded") for point in POINTS
]

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
START = "<!-- chaos-table:start -->"
END = "<!-- chaos-table:end -->"
# Table order; faults tested elsewhere keep a row for their figures.
ORDER = [
    "events-killed",
    "redis-restarted",
    "postgres-restarted",
    "reconnecting-clients",
    "stalled-subscriber",
    "model-rate-limited",
    "executor-lost",
    "executor-orphaned",
    *TAKEOVER_ROWS,
    "rolling-restart",
    "max-takeovers",
    "tools-restarted",
    "replica-lost-events",
    "replica-lost-tools",
    "replica-lost-planner",
    "replica-lost-gateway",
]
PENDING = {
    "executor-lost": "executor owning the run killed, another one running",
    "executor-orphaned": "the only executor killed, none started again",
    "tools-restarted": "tools service restarted mid-call",
}
HEADER = (
    "| fault | runs | subscribers | events | lost | duplicated | gaps | tokens skipped "
    "| streams ended | recovery | recovery measured as |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)


def load_rows(directory: Path = RESULTS_DIR) -> dict[str, dict[str, Any]]:
    rows = {}
    for path in sorted(directory.glob("*.json")):
        row = json.loads(path.read_text())
        rows[row["key"]] = row
    return rows


def render(rows: dict[str, dict[str, Any]]) -> str:
    lines = [HEADER]
    keys = [k for k in ORDER if k in rows or k in PENDING]
    keys += sorted(k for k in rows if k not in ORDER)
    for key in keys:
        row = rows.get(key)
        if row is None:
            lines.append(f"| {PENDING[key]} | " + " | ".join(["…"] * 10) + " |")
            continue
        recovery = row["recovery_seconds"]
        lines.append(
            f"| {row['fault']} | {row['runs']} | {row['subscribers']} | {row['events']} "
            f"| {row['lost']} | {row['duplicated']} | {row['gaps']} "
            f"| {row['ephemeral_skipped']} | {row['streams_ended']}/{row['subscribers']} "
            f"| {'—' if recovery is None else f'{recovery:.2f} s'} "
            f"| {row['recovery_measure']} |"
        )
    scales = sorted({row["scale"] for row in rows.values()})
    stamps = sorted(row["recorded_at"] for row in rows.values())
    if stamps:
        lines.append("")
        lines.append(f"Scale {', '.join(scales)}; recorded {stamps[0]} to {stamps[-1]} (UTC).")
    return "\n".join(lines)


def write(table: str, doc: Path = DOC) -> None:
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc} has no {START} … {END} markers to put the table between")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{table}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--write", action="store_true", help=f"update {DOC.name} in place")
    args = parser.parse_args(argv)
    rows = load_rows()
    if not rows:
        print(f"no results under {RESULTS_DIR}: run `make chaos` first", file=sys.stderr)
        return 1
    table = render(rows)
    if args.write:
        write(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
