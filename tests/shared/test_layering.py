"""The shared foundation stands below everything else: nothing in `shuttle/` imports a service,
the gateway or the command line, so any process can take it without the others."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABOVE_THE_FOUNDATION = {"services", "gateway", "cli"}


def imported_packages(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(), filename=str(source))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_in_the_shared_package_imports_from_above_it() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & ABOVE_THE_FOUNDATION)
        for path in (ROOT / "shuttle").rglob("*.py")
        if "v1" not in path.relative_to(ROOT / "shuttle").parts
    }
    assert {path: found for path, found in offenders.items() if found} == {}
