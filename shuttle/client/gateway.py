"""ShuttleClient: the gateway's HTTP API and SSE streams, over httpx."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal

import httpx
from httpx_sse import ServerSentEvent, connect_sse

from shuttle.client.models import Event, Frame, ShuttleError, Task, TaskSummary

DEFAULT_URL = "http://127.0.0.1:8080"
# A stream that keeps dropping is given up after this many reconnections in a row.
RECONNECT_ATTEMPTS = 20
PAGE_SIZE = 1000

Mode = Literal["simple", "standard", "complex"]
Dialect = Literal["react", "fim"]
# Told (reason, last seq read) before each reconnection.
OnReconnect = Callable[[str, int], None]


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    code = ""
    try:
        error = response.json()["error"]
        message, code = str(error["message"]), str(error.get("code", ""))
    except (ValueError, KeyError, TypeError):
        message = response.text.strip() or response.reason_phrase
    raise ShuttleError(response.status_code, message, code)


class ShuttleClient:
    """Start tasks, follow them live, control them and decide approvals.

    Streams resume on their own: a dropped connection is opened again from the last seq
    read (`Last-Event-ID`), so an iteration sees every event once, in order, up to
    STREAM_END; after `reconnect_attempts` failures in a row it raises ShuttleError.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str = "",
        *,
        timeout: float = 30.0,
        reconnect_attempts: int = RECONNECT_ATTEMPTS,
        on_reconnect: OnReconnect | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Reads on a stream wait as long as the run takes; other calls are bounded.
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=httpx.Timeout(timeout, read=None)
        )
        self._timeout = timeout
        self._reconnect_attempts = reconnect_attempts
        self._on_reconnect = on_reconnect
        self._sleep = sleep

    def __enter__(self) -> ShuttleClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- tasks ----------------------------------------------------------------------------

    def start_task(
        self,
        query: str,
        *,
        session_id: str | None = None,
        mode: Mode | None = None,
        model: str | None = None,
        budget_tokens: int | None = None,
        context: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Submit a task; its workflow id. The same `idempotency_key` (one is made when none
        is given) makes a retried submission the same task."""
        body: dict[str, Any] = {"query": query}
        optional = {
            "session_id": session_id,
            "mode": mode,
            "model": model,
            "budget_tokens": budget_tokens,
            "context": context,
        }
        body.update({name: value for name, value in optional.items() if value is not None})
        key = idempotency_key or f"py-{uuid.uuid4()}"
        created = self._call("POST", "/api/v1/tasks", json=body, headers={"Idempotency-Key": key})
        return str(created["workflow_id"])

    def get_task(self, workflow_id: str) -> Task:
        return Task.from_json(self._call("GET", f"/api/v1/tasks/{workflow_id}"))

    def list_tasks(self, limit: int = 20) -> list[TaskSummary]:
        """The caller's most recent tasks, newest first."""
        listed = self._call("GET", "/api/v1/tasks", params={"limit": limit})["tasks"]
        return [TaskSummary.from_json(task) for task in listed]

    def run(self, query: str, **options: Any) -> Task:
        """Submit a task, follow it to its end, and return it finished."""
        workflow_id = self.start_task(query, **options)
        for _ in self.events(workflow_id):
            pass
        return self.get_task(workflow_id)

    # -- the log --------------------------------------------------------------------------

    def events(
        self, workflow_id: str, *, after_seq: int = 0, types: list[str] | None = None
    ) -> Iterator[Event]:
        """The run's events after `after_seq`, live, up to and including STREAM_END."""
        params = {"workflow_id": workflow_id}
        if types:
            params["types"] = ",".join(types)
        for sse in self._stream("/api/v1/stream/sse", params, after_seq):
            event = Event.from_json(json.loads(sse.data))
            yield event
            if event.type == "STREAM_END":
                return

    def frames(
        self, workflow_id: str, *, dialect: Dialect = "react", after_seq: int = 0
    ) -> Iterator[Frame]:
        """The run as the ReAct channel dialect (step, answer, done, …), live, to its end."""
        path = f"/api/v1/tasks/{workflow_id}/stream"
        for sse in self._stream(path, {"dialect": dialect}, after_seq):
            data = json.loads(sse.data)
            yield Frame(sse.event, data, int(sse.id) if sse.id.isdigit() else 0)
            if sse.event == "done":
                return

    def history(self, workflow_id: str, *, from_seq: int = 1) -> Iterator[Event]:
        """The events recorded so far, from `from_seq`, page by page (no waiting)."""
        while True:
            page = self._call(
                "GET",
                f"/api/v1/tasks/{workflow_id}/events",
                params={"from_seq": from_seq, "limit": PAGE_SIZE},
            )
            for data in page["events"]:
                yield Event.from_json(data)
            if not page.get("next_seq"):
                return
            from_seq = int(page["next_seq"])

    # -- control --------------------------------------------------------------------------

    def pause(self, workflow_id: str, reason: str = "") -> None:
        self._call("POST", f"/api/v1/tasks/{workflow_id}/pause", json={"reason": reason})

    def resume(self, workflow_id: str, reason: str = "") -> None:
        self._call("POST", f"/api/v1/tasks/{workflow_id}/resume", json={"reason": reason})

    def cancel(self, workflow_id: str, reason: str = "") -> None:
        self._call("POST", f"/api/v1/tasks/{workflow_id}/cancel", json={"reason": reason})

    def interrupt(self, workflow_id: str, message: str) -> bool:
        """Send a follow-up the agent sees at its next step; whether the run took it."""
        reply = self._call(
            "POST", f"/api/v1/tasks/{workflow_id}/interrupt", json={"message": message}
        )
        return bool(reply.get("accepted"))

    def decide_approval(self, approval_id: str, approve: bool, comment: str = "") -> str:
        """Approve or deny a pending tool call; the approval's status after the decision."""
        decision = "approved" if approve else "denied"
        reply = self._call(
            "POST",
            f"/api/v1/approvals/{approval_id}",
            json={"decision": decision, "comment": comment},
        )
        return str(reply.get("status", decision))

    # -- transport ------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, timeout=self._timeout, **kwargs)
        except httpx.TransportError as exc:
            raise ShuttleError(0, f"cannot reach the gateway at {self.base_url}: {exc}") from None
        _raise_for(response)
        return response.json()

    def _stream(
        self, path: str, params: dict[str, str], after_seq: int
    ) -> Iterator[ServerSentEvent]:
        """SSE frames of `path`, opened again after the last seq read whenever it drops; the
        caller returns once it has seen its stream's last frame."""
        last_seq = after_seq
        failures = 0
        while True:
            headers = {"Last-Event-ID": str(last_seq)} if last_seq else {}
            try:
                with connect_sse(self._http, "GET", path, params=params, headers=headers) as source:
                    if source.response.status_code != 200:
                        source.response.read()
                        _raise_for(source.response)
                    for sse in source.iter_sse():
                        failures = 0
                        if sse.event == "error":
                            raise ShuttleError(0, f"the stream failed: {sse.data}")
                        if not sse.data:
                            continue  # a keep-alive while the run is quiet
                        if sse.id.isdigit():
                            last_seq = int(sse.id)
                        yield sse
                reason = "the stream closed before its end"
            except httpx.TransportError as exc:
                reason = str(exc) or type(exc).__name__
            failures += 1
            if failures > self._reconnect_attempts:
                raise ShuttleError(0, f"lost the stream of {path}: {reason}")
            if self._on_reconnect is not None:
                self._on_reconnect(reason, last_seq)
            self._sleep(min(0.5 * failures, 5.0))
