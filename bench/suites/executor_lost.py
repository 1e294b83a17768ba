"""How long a browser waits for the end of a run whose only executor is killed mid-run.

The five real processes with a short run lease; each round submits a task whose model call is
held, kills the executor (SIGKILL) once the run is at work, and times the SSE stream from the
kill to STREAM_END (sent after the events service's ERROR_OCCURRED EXECUTOR_LOST: no executor
is left to take the run over). The executor is started again for the next round. The expected
figure is between the lease plus the orphan time (SHUTTLE_EVENTS_ORPHAN_SECONDS) minus one
renewal interval, and that plus one sweep interval. `bench.suites.takeover` measures the case
where another executor takes the run over.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.models import HeldLoopCall
from tests.support.processes import restart_supervised
from tests.support.scripted_openai import ScriptedOpenAI
from tests.support.sse import LiveStream
from tests.support.stack import Stack, start_stack


def one_round(stack: Stack, model: HeldLoopCall) -> float:
    model.arm()
    created = httpx.post(
        f"{stack.gateway}/api/v1/tasks",
        json={"query": "What is 6*7?", "mode": "standard"},
        timeout=30,
    ).json()
    stream = LiveStream(stack.gateway, f"/api/v1/stream/sse?workflow_id={created['workflow_id']}")
    if not model.held.wait(60):
        raise RuntimeError("the run never called the model")
    stream.wait_for("AGENT_THINKING")
    executor = stack.supervisor.processes["executor"]
    killed_at = time.monotonic()
    executor.kill()
    executor.wait()
    model.release()
    frames = stream.join()
    if [frame.event for frame in frames][-2:] != ["ERROR_OCCURRED", "STREAM_END"]:
        raise RuntimeError(f"the stream ended with {[f.event for f in frames][-2:]}")
    waited = stream.arrived("STREAM_END") - killed_at
    restart_supervised(stack.supervisor, "executor")
    return waited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lease", type=float, default=2.0, help="SHUTTLE_RUN_LEASE_SECONDS")
    parser.add_argument(
        "--sweep", type=float, default=0.5, help="SHUTTLE_EVENTS_LEASE_SWEEP_SECONDS"
    )
    parser.add_argument("--orphan", type=float, default=2.0, help="SHUTTLE_EVENTS_ORPHAN_SECONDS")
    args = parser.parse_args()
    model = HeldLoopCall()
    server = ScriptedOpenAI(handler=model).start()
    with tempfile.TemporaryDirectory() as data_dir:
        stack = start_stack(
            Path(data_dir),
            server.base_url,
            extra_env={
                "SHUTTLE_RUN_LEASE_SECONDS": str(args.lease),
                "SHUTTLE_EVENTS_LEASE_SWEEP_SECONDS": str(args.sweep),
                "SHUTTLE_EVENTS_ORPHAN_SECONDS": str(args.orphan),
                "SHUTTLE_LOG_LEVEL": "WARNING",
            },
        )
        try:
            waits = [one_round(stack, model) for _ in range(args.rounds)]
        finally:
            model.release()
            stack.stop()
            server.stop()
    print(
        f"lease {args.lease} s, orphaned after {args.orphan} s more, sweep every {args.sweep} s, "
        f"{args.rounds} rounds"
    )
    print("kill -9 of the executor → STREAM_END on the SSE stream (s):")
    print(
        f"  min {min(waits):.2f}  median {statistics.median(waits):.2f}  max {max(waits):.2f}"
        f"  (each: {', '.join(f'{w:.2f}' for w in waits)})"
    )


if __name__ == "__main__":
    main()
