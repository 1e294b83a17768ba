"""The real grpc-web route with generated bodies, sent whole or in chunks: every answer is a
grpc-web reply with a grpc-status, never an HTTP error or a hang."""

from __future__ import annotations

import base64
import itertools
import struct
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.edge.grpc_web_framing import MESSAGE_FLAG, TRAILER_FLAG, FrameDecoder, encode_frame
from shuttle.v1 import events_pb2
from tests.fuzz.profiles import fewer
from tests.gateway.conftest import AuthStack

pytestmark = pytest.mark.integration

PATH = "/shuttle.v1.EventService/GetWorkflow"


def chunks_of(body: bytes, cuts: list[int]) -> Iterator[bytes]:
    points = sorted({cut % (len(body) + 1) for cut in cuts})
    for start, end in itertools.pairwise([0, *points, len(body)]):
        yield body[start:end]


def post(stack: AuthStack, body: bytes, cuts: list[int], text: bool) -> tuple[int, str]:
    """Send `body` in chunks (a chunked request); the HTTP status and the grpc-status."""
    kind = "application/grpc-web-text" if text else "application/grpc-web+proto"
    response = httpx.post(
        f"{stack.url}{PATH}",
        content=chunks_of(body, cuts),
        headers={"content-type": kind, "authorization": f"Bearer {stack.key_a}"},
        timeout=60,
    )
    status = response.headers.get("grpc-status")
    if status is None:  # not trailers-only: the status is in the body's trailer frame
        decoder = FrameDecoder(text)
        frames = decoder.feed(response.content) + decoder.finish()
        flag, block = frames[-1]
        assert flag == TRAILER_FLAG
        status = dict(line.split(":", 1) for line in block.decode().split("\r\n") if line)[
            "grpc-status"
        ]
    return response.status_code, status


@fewer(3)
@given(
    body=st.binary(max_size=300),
    cuts=st.lists(st.integers(min_value=0), max_size=5),
    text=st.booleans(),
)
@example(body=struct.pack(">BI", MESSAGE_FLAG, 2**31), cuts=[], text=False)
@example(body=base64.b64encode(struct.pack(">BI", MESSAGE_FLAG, 2**31)), cuts=[2], text=True)
@example(body=encode_frame(MESSAGE_FLAG, b"", False) * 20, cuts=[5, 10], text=False)
def test_arbitrary_bodies_get_a_grpc_status(
    auth_stack: AuthStack, body: bytes, cuts: list[int], text: bool
) -> None:
    http_status, grpc_status = post(auth_stack, body, cuts, text)
    assert http_status == 200
    # 3 INVALID_ARGUMENT (framing, or a message that is not a GetWorkflowRequest), 5 NOT_FOUND
    # (it parsed, but names no workflow of this tenant), 8 RESOURCE_EXHAUSTED (a frame
    # announcing more than SHUTTLE_GATEWAY_MAX_BODY_BYTES), 0 only for a real workflow.
    assert grpc_status in ("3", "5", "8"), grpc_status


@fewer(3)
@given(cuts=st.lists(st.integers(min_value=0), max_size=8), text=st.booleans())
def test_a_valid_request_in_any_chunks_reaches_the_backend(
    auth_stack: AuthStack, finished_a: str, cuts: list[int], text: bool
) -> None:
    request = events_pb2.GetWorkflowRequest(workflow_id=finished_a).SerializeToString()
    body = encode_frame(MESSAGE_FLAG, request, text) + encode_frame(TRAILER_FLAG, b"", text)
    assert post(auth_stack, body, cuts, text) == (200, "0")
