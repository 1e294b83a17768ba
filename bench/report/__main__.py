"""`python -m bench.report`: docs/benchmarks.md and docs/img/*.png from var/bench/*.json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .render import render_files

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=REPO / "var" / "bench")
    parser.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--images", type=Path, default=REPO / "docs" / "img")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(f"no results at {args.results}: run `python -m bench` first", file=sys.stderr)
        return 2
    try:
        render_files(args.results, args.doc, args.images)
    except ValueError as exc:
        print(f"cannot render: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.doc} and its charts under {args.images}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
