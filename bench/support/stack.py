"""The five Shuttle processes for a benchmark, on the embedded defaults, in a scratch dir;
another checkout's five as a side of their own (`--baseline DIR`)."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.support.model_server import ModelProcess, model_process
from tests.support.stack import Stack, start_stack

# Guards that add model calls would make the sides' call counts differ; the gateway's
# per-client request limit would refuse a benchmark's many connections from one address.
STACK_ENV = {
    "SHUTTLE_REACT_COMPLETION_CHECK": "false",
    "SHUTTLE_LOG_LEVEL": "WARNING",
    "SHUTTLE_MAX_ITERATIONS": "100",
    "SHUTTLE_RATE_LIMIT": "1000000/minute",
    # The suites run up to a thousand runs at once, all of one tenant.
    "SHUTTLE_TENANT_MAX_RUNS": "0",
}


@contextlib.contextmanager
def running_stack(env: dict[str, str], openai_base_url: str = "") -> Iterator[Stack]:
    """All five processes; an empty `openai_base_url` means the offline demo model."""
    with tempfile.TemporaryDirectory() as data_dir:
        stack = start_stack(Path(data_dir), openai_base_url, extra_env=env)
        try:
            yield stack
        finally:
            stack.stop()


@contextlib.contextmanager
def scripted_stack(latency_seconds: float = 0.0) -> Iterator[tuple[ModelProcess, Stack]]:
    """The K-iterations model in its own process and the five Shuttle processes (SQLite,
    in-process hot tier)."""
    with (
        model_process(latency_seconds) as model,
        running_stack(STACK_ENV, model.base_url) as stack,
    ):
        yield model, stack


def add_baseline_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        help="another checkout whose processes run as a side too (repeatable)",
    )


def baseline_stacks(
    checkouts: list[Path] | None, openai_base_url: str, exits: contextlib.ExitStack
) -> dict[str, Stack]:
    """Each checkout's five processes against the same model, by side name (see
    `baseline_names`), stopped with `exits`."""
    return {
        name: exits.enter_context(running_stack(checkout_env(checkout), openai_base_url))
        for name, checkout in baseline_names(checkouts or []).items()
    }


def baseline_names(checkouts: list[Path]) -> dict[str, Path]:
    """Each checkout by its side's name: `baseline` alone, else `baseline:<folder>`."""
    if len(checkouts) == 1:
        return {"baseline": checkouts[0]}
    names = {f"baseline:{checkout.resolve().name}": checkout for checkout in checkouts}
    if len(names) < len(checkouts):
        raise SystemExit("--baseline: give checkouts in folders of different names")
    return names


def checkout_env(checkout: Path) -> dict[str, str]:
    """The stack's settings, its processes importing Shuttle from `checkout`: Python puts
    the working directory first on the path of `-m` unless told not to (PYTHONSAFEPATH)."""
    if not (checkout / "services" / "executor" / "__main__.py").is_file():
        raise SystemExit(f"--baseline {checkout}: not a Shuttle checkout")
    if not (checkout / "shuttle" / "v1" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {checkout}: generate its stubs first (make proto there)")
    return {**STACK_ENV, "PYTHONPATH": str(checkout.resolve()), "PYTHONSAFEPATH": "1"}
