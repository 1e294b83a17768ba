"""grpc-web framing: decoding never crashes or hangs; encode → decode round trips, in chunks."""

from __future__ import annotations

import base64
import itertools
import struct
from urllib.parse import unquote

import grpc
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.edge.grpc_web_framing import (
    MESSAGE_FLAG,
    TRAILER_FLAG,
    Frame,
    FrameDecoder,
    FramingError,
    decode_text,
    encode_frame,
    parse_frames,
    single_message,
    trailer_block,
)
from tests.fuzz.profiles import fuzz

frames_strategy = st.lists(
    st.tuples(st.sampled_from([MESSAGE_FLAG, TRAILER_FLAG]), st.binary(max_size=300)),
    max_size=6,
)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def decode_in_chunks(chunks: list[bytes], text: bool, max_length: int = 2**32) -> list[Frame]:
    decoder = FrameDecoder(text, max_length=max_length)
    frames: list[Frame] = []
    for chunk in chunks:
        frames += decoder.feed(chunk)
    return frames + decoder.finish()


@fuzz
@given(body=st.binary(max_size=600), cuts=st.lists(st.integers(min_value=0), max_size=8))
@example(body=b"\x00\xff\xff\xff\xff", cuts=[])  # announces 4 GiB: refused at the header
@example(body=b"AAAA==AAAA", cuts=[3])
@example(body=b"A", cuts=[])
def test_arbitrary_bytes_are_frames_or_our_error(body: bytes, cuts: list[int]) -> None:
    for text in (False, True):
        try:
            frames = decode_in_chunks(split_at(body, cuts), text, max_length=1_000)
        except FramingError as exc:
            assert str(exc)
        else:
            assert all(len(payload) <= 1_000 for _, payload in frames)


@fuzz
@given(body=st.binary(max_size=600), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_chunking_never_changes_the_outcome(body: bytes, cuts: list[int]) -> None:
    """Incremental and one-shot decoding agree: same frames, or both refuse."""
    for text in (False, True):
        try:
            whole: list[Frame] | None = parse_frames(decode_text(body) if text else body)
        except FramingError:
            whole = None
        try:
            chunked: list[Frame] | None = decode_in_chunks(split_at(body, cuts), text)
        except FramingError:
            chunked = None
        assert chunked == whole


@fuzz
@given(
    frames=frames_strategy,
    text=st.booleans(),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
    whitespace=st.booleans(),
)
def test_encoded_frames_decode_back_at_any_chunk_boundaries(
    frames: list[Frame], text: bool, cuts: list[int], whitespace: bool
) -> None:
    body = b"".join(encode_frame(flag, payload, text) for flag, payload in frames)
    if text and whitespace:  # line breaks some base64 writers insert
        body = b"\r\n".join(body[i : i + 76] for i in range(0, len(body), 76))
    assert decode_in_chunks(split_at(body, cuts), text) == frames


@fuzz
@given(payload=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0), max_size=4))
def test_text_mode_accepts_one_base64_run_for_all_frames(payload: bytes, cuts: list[int]) -> None:
    """Some clients encode the whole body at once rather than frame by frame."""
    raw = encode_frame(MESSAGE_FLAG, payload, text=False) + encode_frame(TRAILER_FLAG, b"", False)
    body = base64.b64encode(raw).rstrip(b"=")  # unpadded, as some writers leave it
    frames = decode_in_chunks(split_at(body, cuts), text=True)
    assert single_message(frames) == payload


def test_a_frame_larger_than_the_limit_is_refused_before_its_bytes_arrive() -> None:
    decoder = FrameDecoder(text=False, max_length=1_000)
    with pytest.raises(FramingError, match="announces 1001 bytes; at most 1000"):
        decoder.feed(struct.pack(">BI", MESSAGE_FLAG, 1_001))


printable = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
metadata_keys = st.from_regex(r"\A[a-z][a-z0-9_.\-]{0,15}\Z")


def read_trailers(block: bytes) -> dict[str, str]:
    """A client's reading of a trailer block: `key:value` lines, grpc-message percent-decoded."""
    lines = block.decode("ascii").split("\r\n")
    assert lines[-1] == ""
    fields = dict(line.split(":", 1) for line in lines[:-1])
    if "grpc-message" in fields:
        fields["grpc-message"] = unquote(fields["grpc-message"], errors="strict")
    return fields


@fuzz
@given(
    code=st.sampled_from(list(grpc.StatusCode)),
    message=st.text(max_size=60),
    metadata=st.dictionaries(metadata_keys.filter(lambda k: not k.startswith("grpc-")), printable),
    text=st.booleans(),
    cuts=st.lists(st.integers(min_value=0), max_size=5),
)
@example(
    code=grpc.StatusCode.INVALID_ARGUMENT,
    message="bad\r\ngrpc-status:0\r\n",
    metadata={},
    text=False,
    cuts=[],
)  # a message cannot forge a header line
def test_trailer_frames_carry_status_message_and_metadata(
    code: grpc.StatusCode,
    message: str,
    metadata: dict[str, str],
    text: bool,
    cuts: list[int],
) -> None:
    block = trailer_block(code.value[0], message, metadata.items())
    body = encode_frame(MESSAGE_FLAG, b"reply", text) + encode_frame(TRAILER_FLAG, block, text)
    frames = decode_in_chunks(split_at(body, cuts), text)
    assert frames[0] == (MESSAGE_FLAG, b"reply")
    assert frames[1][0] == TRAILER_FLAG
    trailers = read_trailers(frames[1][1])
    assert trailers.pop("grpc-status") == str(code.value[0])
    assert trailers.pop("grpc-message", "") == message
    assert trailers == metadata
