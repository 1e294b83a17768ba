"""The `shuttle` commands that talk to a running gateway: run, events, tasks, approve."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx
from httpx_sse import connect_sse

RECONNECT_ATTEMPTS = 20


class CliError(Exception):
    """A failure to show the user as one line."""


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text.strip() or response.reason_phrase
    raise CliError(f"{response.status_code}: {message}")


@dataclass
class Gateway:
    base_url: str
    api_key: str = ""
    timeout: float = 30.0

    def client(self, timeout: float | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout, read=timeout),
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            with self.client(self.timeout) as client:
                response = client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the gateway at {self.base_url}: {exc}") from None
        _raise_for(response)
        return response.json()


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


def follow(
    gateway: Gateway, workflow_id: str, view: LiveView, sleep: Callable[[float], None] = time.sleep
) -> None:
    """Stream the run's ReAct channels to the end, reconnecting from the last seq on a drop."""
    last_id = ""
    failures = 0
    path = f"/api/v1/tasks/{workflow_id}/stream?dialect=fim"
    while True:
        headers = {"Last-Event-ID": last_id} if last_id else {}
        try:
            with (
                gateway.client(timeout=None) as client,
                connect_sse(client, "GET", path, headers=headers) as source,
            ):
                if source.response.status_code != 200:
                    source.response.read()
                    _raise_for(source.response)
                for sse in source.iter_sse():
                    failures = 0
                    if sse.event == "error":
                        raise CliError(f"stream failed: {sse.data}")
                    view.show(sse.event, json.loads(sse.data) if sse.data else {})
                    if sse.id:
                        last_id = sse.id
            if view.done is not None:
                return
            reason = "the stream closed early"
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
        failures += 1
        if failures > RECONNECT_ATTEMPTS:
            raise CliError(f"lost the stream of {workflow_id}: {reason}")
        view.err.write(f"(connection lost: {reason}; resuming after event {last_id or 0})\n")
        sleep(min(0.5 * failures, 5.0))


def run(gateway: Gateway, query: str, view: LiveView) -> str:
    # A fixed key makes a retried submission (after a timeout, say) the same task.
    created = gateway.call(
        "POST",
        "/api/v1/tasks",
        json={"query": query},
        headers={"Idempotency-Key": f"cli-{uuid.uuid4()}"},
    )
    workflow_id = str(created["workflow_id"])
    view.err.write(f"workflow {workflow_id}\n")
    follow(gateway, workflow_id, view)
    return workflow_id


def events(gateway: Gateway, workflow_id: str, out: TextIO, as_json: bool) -> None:
    from_seq = 1
    while True:
        page = gateway.call(
            "GET",
            f"/api/v1/tasks/{workflow_id}/events",
            params={"from_seq": from_seq, "limit": 1000},
        )
        for event in page["events"]:
            if as_json:
                out.write(json.dumps(event, ensure_ascii=False) + "\n")
            else:
                out.write(f"{event['seq']:>5}  {event['type']:<26} {event['message']}\n")
        if not page.get("next_seq"):
            return
        from_seq = page["next_seq"]


def tasks(gateway: Gateway, out: TextIO, limit: int) -> None:
    listed = gateway.call("GET", "/api/v1/tasks", params={"limit": limit})["tasks"]
    if not listed:
        out.write("no tasks yet\n")
    for task in listed:
        query = task["query"].replace("\n", " ")
        out.write(f"{task['workflow_id']}  {task['status']:<10} {query[:70]}\n")


def approve(gateway: Gateway, approval_id: str, deny: bool, comment: str, out: TextIO) -> None:
    decision = "denied" if deny else "approved"
    reply = gateway.call(
        "POST", f"/api/v1/approvals/{approval_id}", json={"decision": decision, "comment": comment}
    )
    out.write(f"{approval_id}: {reply.get('status', decision)}\n")
