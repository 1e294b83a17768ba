"""The five Shuttle processes for a benchmark, on the embedded defaults, in a scratch dir."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.stack import Stack, start_stack


@contextlib.contextmanager
def running_stack(env: dict[str, str], openai_base_url: str = "") -> Iterator[Stack]:
    """All five processes; an empty `openai_base_url` means the offline demo model."""
    with tempfile.TemporaryDirectory() as data_dir:
        stack = start_stack(Path(data_dir), openai_base_url, extra_env=env)
        try:
            yield stack
        finally:
            stack.stop()
