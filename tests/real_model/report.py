"""Render the real-model runs (var/real-model/*.json) as the table in docs/real-models.md.

python -m tests.real_model.report            # print the table
python -m tests.real_model.report --write    # replace the table in docs/real-models.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tests.real_model.conftest import LLM_TIMEOUT_SECONDS
from tests.real_model.outcome import RESULTS_DIR
from tests.real_model.tasks import TASKS

DOC = Path(__file__).resolve().parents[2] / "docs" / "real-models.md"
START = "<!-- real-model-table:start -->"
END = "<!-- real-model-table:end -->"
HEADER = (
    "| task | exercises | mode | s | iterations | model calls | longest call s | tools "
    "| ended | what the engine did | answer |\n"
    "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"
)


def table(directory: Path = RESULTS_DIR) -> str:
    """The table, one row per task, then a line that sums the runs up."""
    lines = [HEADER]
    rows: list[dict[str, Any]] = []
    for task in TASKS:
        path = directory / f"{task.name}.json"
        if not path.exists():
            lines.append(f"| {task.name} | {task.exercises} | not run | | | | | | | | |")
            continue
        row = json.loads(path.read_text())
        rows.append(row)
        cells = [
            row["name"] + ("" if row["models"] == "discovered" else f" ({row['models']})"),
            row["exercises"],
            row["mode"] + (f" (plan: {'; '.join(row['plan'])})" if row.get("plan") else ""),
            f"{row['seconds']:.1f}",
            str(row["iterations"]),
            str(row["model_calls"]),
            f"{row['longest_call_seconds']:.1f}",
            ", ".join(row["tools"]) or "none",
            row["ended"],
            "; ".join(row["handled"]) or "nothing to mend",
            row["answer"].replace("|", "\\|"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + summary(rows)


def summary(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No task has run yet."
    ended = Counter(row["ended"] for row in rows)
    seconds = [row["seconds"] for row in rows]
    return (
        f"{len(rows)} of {len(TASKS)} tasks ran, one after another, in {sum(seconds):.0f} s; "
        + ", ".join(f"{count} ended {what}" for what, count in sorted(ended.items()))
        + f". A run took {min(seconds):.0f} to {max(seconds):.0f} s; the longest model call "
        f"{max(row['longest_call_seconds'] for row in rows):.0f} s of its "
        f"{LLM_TIMEOUT_SECONDS:.0f} s bound."
    )


def write(rendered: str, doc: Path = DOC) -> None:
    text = doc.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{rendered}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update docs/real-models.md")
    args = parser.parse_args(argv)
    rendered = table()
    if args.write:
        write(rendered)
    else:
        sys.stdout.write(rendered + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
