"""The real-model suite's fixtures: llama.cpp's server with Gemma 3 270M, a recorder of every
model call in front of it, and one Shuttle stack per models file (tasks.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.real_model.llama_server import CONTEXT_TOKENS, LlamaServer, model_file
from tests.real_model.model_calls import ModelCallRecorder
from tests.real_model.tasks import Models, models_file
from tests.support.stack import Stack, start_stack

MODELS_DIR = Path("var/models")

RUN_TIMEOUT_SECONDS = 150.0
"""Shorter than the default 600 s, so that the suite shows a run that would stall."""
LLM_TIMEOUT_SECONDS = 60.0
"""Per model call: several times what a call at the output cap takes here."""
MAX_OUTPUT_TOKENS = 256
"""The base model writes until it is stopped: a quarter of the default cap (1,024) keeps
each call near ten seconds on two cores."""

BOUNDS = {
    "SHUTTLE_RUN_TIMEOUT_SECONDS": str(RUN_TIMEOUT_SECONDS),
    "SHUTTLE_LLM_TIMEOUT_SECONDS": str(LLM_TIMEOUT_SECONDS),
    "SHUTTLE_LLM_MAX_OUTPUT_TOKENS": str(MAX_OUTPUT_TOKENS),
}


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = model_file(MODELS_DIR)
    server = LlamaServer(model, tmp_path_factory.mktemp("llama") / "server.log").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def recorder(llama: LlamaServer) -> Iterator[ModelCallRecorder]:
    started = ModelCallRecorder(llama.base_url).start()
    yield started
    started.stop()


@pytest.fixture(scope="session")
def stack_for(
    recorder: ModelCallRecorder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[Models], Stack]]:
    """The stack for a models file, started at first use; one at a time (two cores)."""
    running: dict[Models, Stack] = {}

    def get(models: Models) -> Stack:
        if models not in running:
            for other in list(running):
                running.pop(other).stop()
            data_dir = tmp_path_factory.mktemp(f"stack-{models}")
            path = models_file(data_dir / "models.yaml", recorder.base_url, models, CONTEXT_TOKENS)
            env = {**BOUNDS, "SHUTTLE_MODELS_FILE": str(path)}
            running[models] = start_stack(data_dir, extra_env=env)
        return running[models]

    yield get
    for stack in running.values():
        stack.stop()
