"""The `shuttle` commands that talk to a running gateway: run, events, tasks, approve.
They go through `shuttle.client`; this module renders what it returns."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from shuttle.client import ShuttleClient


@dataclass
class LiveView:
    """Renders the ReAct channels: steps on `err`, the answer on `out`. On a terminal the
    answer streams as it comes; elsewhere (a pipe, a file) it is written once, whole, since
    what was written there cannot be taken back when the run tells its answer again."""

    out: TextIO = sys.stdout
    err: TextIO = sys.stderr
    done: dict[str, Any] | None = None
    answer_open: bool = field(default=False)
    live: bool | None = None
    """Stream the answer as it comes; None: when `out` is a terminal."""
    _shown: str = ""
    """The answer as written on `out` since its start."""

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.out.isatty()

    def show(self, channel: str, data: dict[str, Any]) -> None:
        handler: Callable[[dict[str, Any]], None] | None = getattr(self, f"_{channel}", None)
        if handler is not None:
            handler(data)

    def _note(self, text: str) -> None:
        if self.answer_open:
            self.out.write("\n")
            self.out.flush()
            self.answer_open = False
        self.err.write(text + "\n")
        self.err.flush()

    def _step(self, d: dict[str, Any]) -> None:
        if d.get("type") == "thinking" and d.get("status") == "start":
            self._note(f"· thinking (iteration {d.get('iteration')})")
        elif d.get("type") == "thinking" and d.get("reasoning"):
            self._note(f"  {d['reasoning']}")
        elif d.get("type") == "iteration" and d.get("status") == "start":
            self._note(
                f"→ {d.get('tool_name')} {json.dumps(d.get('tool_args'), ensure_ascii=False)}"
            )
        elif d.get("type") == "iteration":
            mark = "✗" if d.get("error") else "←"
            observation = str(d.get("observation", "")).strip().replace("\n", " ")
            elapsed = float(d.get("iter_elapsed", 0))
            self._note(f"{mark} {d.get('tool_name')} ({elapsed:.2f} s): {observation[:200]}")

    def _answer(self, d: dict[str, Any]) -> None:
        status = d.get("status")
        if status == "start":
            self._note("answer:")
            self._shown = ""
        elif status == "delta" and self.live:
            self._write(str(d.get("content", "")))
        elif status == "restart":
            # The run moved to another executor, which tells the answer again from its start.
            self._note("— answer restarted —")
            self._shown = ""
        elif status == "done":
            whole = str(d.get("content", ""))
            if self._shown and not whole.startswith(self._shown):
                self._note("— the answer in full —")
                self._shown = ""
            self._write(whole[len(self._shown) :])  # what deltas lost on the way, if any

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self._shown += text
        self.answer_open = True

    def _inject(self, d: dict[str, Any]) -> None:
        self._note(f"↪ follow-up: {d.get('content')}")

    def _compact(self, d: dict[str, Any]) -> None:
        self._note(f"· context compacted ({d.get('original_messages')} → {d.get('kept_messages')})")

    def _phase(self, d: dict[str, Any]) -> None:
        self._note(f"· {d.get('phase')}")

    def _done(self, d: dict[str, Any]) -> None:
        self.done = d
        if d.get("error") or d.get("cancelled"):
            self._note(f"run ended: {d.get('error') or 'cancelled'}")
            return
        usage = d.get("usage") or {}
        self._note(
            f"── {usage.get('total_tokens', 0)} tokens · ${usage.get('cost_usd', 0):.6f} · "
            f"{d.get('iterations', 0)} iterations · {d.get('elapsed', 0):.2f} s"
        )


def follow(shuttle: ShuttleClient, workflow_id: str, view: LiveView) -> None:
    """Show the run's ReAct channels to its end; the client resumes a dropped stream."""
    for frame in shuttle.frames(workflow_id, dialect="fim"):
        view.show(frame.channel, frame.data)


def run(shuttle: ShuttleClient, query: str, view: LiveView) -> str:
    workflow_id = shuttle.start_task(query)
    view.err.write(f"workflow {workflow_id}\n")
    follow(shuttle, workflow_id, view)
    return workflow_id


def events(shuttle: ShuttleClient, workflow_id: str, out: TextIO, as_json: bool) -> None:
    for event in shuttle.history(workflow_id):
        if as_json:
            envelope = asdict(event)
            envelope["timestamp"] = event.timestamp.isoformat() if event.timestamp else None
            out.write(json.dumps(envelope, ensure_ascii=False) + "\n")
        else:
            out.write(f"{event.seq:>5}  {event.type:<26} {event.message}\n")


def tasks(shuttle: ShuttleClient, out: TextIO, limit: int) -> None:
    listed = shuttle.list_tasks(limit)
    if not listed:
        out.write("no tasks yet\n")
    for task in listed:
        query = task.query.replace("\n", " ")
        out.write(f"{task.workflow_id}  {task.status:<10} {query[:70]}\n")


def approve(
    shuttle: ShuttleClient, approval_id: str, deny: bool, comment: str, out: TextIO
) -> None:
    status = shuttle.decide_approval(approval_id, approve=not deny, comment=comment)
    out.write(f"{approval_id}: {status}\n")
