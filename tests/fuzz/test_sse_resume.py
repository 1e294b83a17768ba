"""SSE resume ids (Last-Event-ID / last_event_id) in both dialects: parsing, round trips,
and the real routes over HTTP with generated ids."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.errors import ApiError
from gateway.routes.stream import react_channel_frames, resume_point, typed_frames
from shuttle.envelope import stream_id, type_value
from shuttle.v1 import common_pb2
from tests.fuzz.profiles import fewer, fuzz
from tests.gateway.conftest import AuthStack
from tests.support.sse import Frame, parse_frames

MAX_SEQ = 2**63 - 1
seqs = st.integers(min_value=0, max_value=MAX_SEQ)
id_like = st.one_of(
    seqs.map(str),
    seqs.map(stream_id),
    st.integers().map(str),
    st.from_regex(r"\A[0-9+\-_ .eE]{0,25}\Z"),
    st.text(max_size=40),
)


@fuzz
@given(header=st.none() | id_like, query=st.none() | id_like)
@example(header="٣", query=None)  # another script's digit: int() reads it, we do not
@example(header="7_0", query=None)
@example(header="9" * 5_000, query=None)  # past int()'s digit limit
@example(header=str(2**63), query=None)
def test_any_id_is_a_resume_point_or_a_clear_400(header: str | None, query: str | None) -> None:
    chosen = (header if header else query) or ""
    seq_text = chosen.strip().removesuffix("-0")
    emitted_form = seq_text.isascii() and seq_text.isdigit() and len(seq_text) <= 19
    try:
        from_seq = resume_point(header, query)
    except ApiError as exc:
        assert exc.status == 400 and exc.code == "invalid_argument"
        # The value is echoed cut short: at most 40 characters, each escaped to 10 at worst.
        assert "Last-Event-ID" in exc.message and len(exc.message) < 600
        assert chosen.strip() and not (emitted_form and int(seq_text) < 2**63)
        return
    if chosen.strip():
        assert emitted_form and from_seq == int(seq_text) + 1
    else:
        assert from_seq == 1


@fuzz
@given(seq=seqs, query=st.none() | id_like)
def test_the_header_wins_over_the_query(seq: int, query: str | None) -> None:
    assert resume_point(str(seq), query) == seq + 1


def _event(seq: int, type_name: str) -> common_pb2.Event:
    return common_pb2.Event(
        workflow_id="wf-fuzz",
        type=type_value(type_name),
        seq=seq,
        stream_id=stream_id(seq),
        payload_json=json.dumps({"delta": "x", "index": 0, "content": "x", "status": "start"}),
    )


@fuzz
@given(seq=st.integers(min_value=1, max_value=MAX_SEQ), type_name=st.sampled_from(
    ["WORKFLOW_STARTED", "AGENT_THINKING", "THREAD_MESSAGE_DELTA", "THREAD_MESSAGE_COMPLETED",
     "WORKFLOW_COMPLETED", "STREAM_END"]
))  # fmt: skip
def test_every_id_the_gateway_emits_resumes_right_after_its_event(seq: int, type_name: str) -> None:
    event = _event(seq, type_name)
    typed = typed_frames(event)
    emitted = [frame.id for frame in [*typed, *react_channel_frames()(event)]]
    emitted.append(json.loads(str(typed[0].data))["stream_id"])
    for event_id in emitted:
        if event_id is not None:  # a ReAct channel event's earlier frames carry no id
            assert resume_point(event_id, None) == seq + 1
            assert resume_point(None, event_id) == seq + 1


# -- the real routes -------------------------------------------------------------------------


def read(auth_stack: AuthStack, path: str, headers: dict[str, str]) -> tuple[int, list[Frame]]:
    with (
        auth_stack.client(auth_stack.key_a) as client,
        client.stream("GET", path, headers=headers) as response,
    ):
        if response.status_code != 200:
            body = json.loads(response.read())
            assert body["error"]["code"] and body["error"]["message"], body
            return response.status_code, []
        lines = [line.rstrip("\r") for line in response.iter_lines()]
    frames, _ = parse_frames(lines)
    return 200, frames


@pytest.fixture(scope="module")
def full_streams(auth_stack: AuthStack, finished_a: str) -> dict[str, list[Frame]]:
    """Each dialect's whole stream of a finished workflow, read once from the start."""
    streams = {}
    for dialect, path in _paths(finished_a).items():
        status, frames = read(auth_stack, path, {})
        assert status == 200 and frames
        streams[dialect] = frames
    return streams


def _paths(workflow_id: str) -> dict[str, str]:
    return {
        "typed": f"/api/v1/stream/sse?workflow_id={workflow_id}",
        "fim": f"/api/v1/tasks/{workflow_id}/stream?dialect=fim",
    }


# Values an HTTP client can put in a header: visible ASCII and inner spaces (h11 refuses to
# send a value that starts or ends with whitespace).
header_values = st.one_of(
    seqs.map(str),
    seqs.map(stream_id),
    st.from_regex(r"\A[0-9+\-_.eE]([0-9+\-_ .eE]{0,23}[0-9+\-_.eE])?\Z"),
    st.text(
        alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=30
    ),
)


@pytest.mark.integration
@fewer(3)
@given(value=header_values, in_query=st.booleans())
@example(value="9" * 30, in_query=False)
@example(value="1-0", in_query=True)
def test_generated_ids_on_the_real_routes_resume_or_are_400(
    auth_stack: AuthStack,
    finished_a: str,
    full_streams: dict[str, list[Frame]],
    value: str,
    in_query: bool,
) -> None:
    for dialect, path in _paths(finished_a).items():
        if in_query:
            status, frames = read(auth_stack, f"{path}&last_event_id={quote(value, safe='')}", {})
        else:
            status, frames = read(auth_stack, path, {"Last-Event-ID": value})
        try:
            after = resume_point(value, None) - 1
        except ApiError:
            assert status == 400, (dialect, value, status)
            continue
        assert status == 200, (dialect, value, status)
        expected = [int(f.id) for f in full_streams[dialect] if f.id and int(f.id) > after]
        assert [int(f.id) for f in frames if f.id] == expected
        if dialect == "typed":  # the typed dialect repeats each event exactly
            full = full_streams[dialect]
            assert [f.data for f in frames] == [f.data for f in full if int(f.id or 0) > after]


@pytest.mark.integration
@fewer(3)
@given(query=st.text(max_size=30))
def test_any_query_value_is_a_stream_or_a_400_never_a_5xx(
    auth_stack: AuthStack, finished_a: str, query: str
) -> None:
    with auth_stack.client(auth_stack.key_a) as client:
        for path in _paths(finished_a).values():
            url = f"{path}&last_event_id={quote(query, safe='')}"
            with client.stream("GET", url) as response:
                response.read()
                assert response.status_code in (200, 400), response.text
                if response.status_code == 400:
                    assert "Last-Event-ID" in response.json()["error"]["message"]


@pytest.mark.integration
def test_an_id_past_the_end_of_a_finished_stream_ends_at_once(
    auth_stack: AuthStack, finished_a: str
) -> None:
    for path in _paths(finished_a).values():
        status, frames = read(auth_stack, path, {"Last-Event-ID": str(10**12)})
        assert (status, frames) == (200, [])
