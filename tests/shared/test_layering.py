"""How the tree is laid out: the shared foundation below everything (nothing in `shuttle/`
imports a service, the gateway or the command line), no import circles, short modules."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
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


PACKAGES = ("shuttle", "services", "gateway", "cli")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "v1" not in path.relative_to(ROOT).parts[1:2]
        and "migrations" not in path.relative_to(ROOT).parts
    }


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports (TYPE_CHECKING imports too), by their full name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module in modules and module != name}


def import_circle(modules: dict[str, Path]) -> list[str]:
    """Modules that import each other round a circle, or [] when there is none."""
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as cycle:
        return list(cycle.args[1])
    return []


def test_no_module_imports_itself_through_others() -> None:
    assert import_circle(project_modules()) == []


def test_a_circle_through_a_relative_and_a_type_checking_import_is_seen(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    )
    modules = {"pkg": package / "__init__.py", "pkg.a": package / "a.py", "pkg.b": package / "b.py"}
    assert set(import_circle(modules)) == {"pkg.a", "pkg.b"}


MODULE_MAX_LINES = 400
"""Past this a module holds more than one concept: split it."""


def test_every_module_is_short_enough_to_read_at_a_sitting() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for folder in (*PACKAGES, "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if "v1" not in path.relative_to(ROOT).parts[1:2]
        and "node_modules" not in path.parts
        and (lines := len(path.read_text().splitlines())) > MODULE_MAX_LINES
    }
    assert long == {}


def test_the_executor_root_holds_only_what_belongs_to_no_room() -> None:
    root = {path.name for path in (ROOT / "services" / "executor").glob("*.py")}
    assert root == {
        "__init__.py",
        "__main__.py",
        "agents.py",
        "grpc_api.py",
        "lease.py",
        "ports.py",
        "runs.py",
        "takeover.py",
    }
