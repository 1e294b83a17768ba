"""Settings every test directory shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import hypothesis_profiles

hypothesis_profiles.load()

REAL_MODEL_DIR = "real_model"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-model",
        action="store_true",
        help="run tests/real_model (a real model behind llama.cpp: make test-real-model)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The real-model suite needs its extra and takes minutes: it runs only when asked."""
    if REAL_MODEL_DIR in collection_path.parts and not config.getoption("--real-model"):
        return True
    return None
