"""The K-iterations scripted model in a process of its own, so its CPU is not the benchmark's.

Prints `port <N>` once it listens and serves until stdin closes (its parent exited) or SIGTERM.

    .venv/bin/python -m bench.support.model_server [--latency SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.scripted_openai import Reply, ScriptedOpenAI, text, tool_call


def k_iterations_model(body: dict[str, Any]) -> Reply:
    """Asks for K calculator calls (K is in the question), then answers."""
    if body.get("stream"):
        return text("All iterations are done.")
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    wanted = int(re.search(r"iterations=(\d+)", str(question)).group(1))  # type: ignore[union-attr]
    done = sum(m["role"] == "tool" for m in body["messages"])
    if done < wanted:
        return tool_call("calculator", {"expression": f"{done}+1"}, call_id=f"call_{done}")
    return text(f"Done after {done} calls.")


KEEP_ALIVE_SECONDS = 3600


@dataclass(frozen=True)
class ModelProcess:
    base_url: str
    pid: int


@contextlib.contextmanager
def model_process(latency_seconds: float = 0.0) -> Iterator[ModelProcess]:
    """The scripted model as a child process, stopped on exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.support.model_server", "--latency", str(latency_seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            raise RuntimeError(f"the model server did not start (said {line!r})")
        yield ModelProcess(f"http://127.0.0.1:{line[1]}/v1", process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    args = parser.parse_args()
    model = ScriptedOpenAI(handler=k_iterations_model)
    model.latency_seconds = args.latency
    # Idle connections stay open for the whole benchmark. After uvicorn's default 5 s, its
    # close of an idle connection raced a client reusing it under load: 5 of 600 bare-loop
    # runs (no retries) failed with httpx's ReadError, none with the connections kept.
    model.keep_alive_seconds = KEEP_ALIVE_SECONDS
    model.start()
    print(f"port {model.port}", flush=True)
    sys.stdin.read()  # returns when the parent closes the pipe or exits; SIGTERM ends it too
    model.stop()


if __name__ == "__main__":
    main()
