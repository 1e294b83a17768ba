"""grpc-web wire format, as Envoy's grpc_web filter speaks it.

A body is a run of frames: one flag byte (0x00 message, 0x80 trailers; bit 0x01 would mean
compressed), a 4-byte big-endian length, the bytes. Trailers are an HTTP/1-style header block.
In text mode (`application/grpc-web-text`) each frame is base64-encoded on its own, so a
body is a concatenation of padded base64 segments.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

MESSAGE_FLAG = 0x00
TRAILER_FLAG = 0x80
COMPRESSED_BIT = 0x01
_HEADER = struct.Struct(">BI")

_CONTENT_TYPE = re.compile(r"^application/grpc-web(-text)?(?:\+(proto|json))?$")
_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")
_WHITESPACE = re.compile(rb"\s+")
_SEGMENT_END = re.compile(rb"(?<==)(?=[^=])")
MAX_FRAME_BYTES = 16 * 1024 * 1024
"""The largest frame a decoder accepts unless told otherwise: gRPC's own message limit."""
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


class FramingError(ValueError):
    """The request body is not valid grpc-web; the message says what is wrong."""


class FrameTooLarge(FramingError):
    """A frame announces more bytes than the decoder accepts."""

    def __init__(self, length: int, max_length: int) -> None:
        super().__init__(f"a frame announces {length} bytes; at most {max_length} are accepted")
        self.length, self.max_length = length, max_length


@dataclass(frozen=True)
class WebContentType:
    text: bool
    codec: str  # "proto" or "json"

    @property
    def response(self) -> str:
        return f"application/grpc-web{'-text' if self.text else ''}+{self.codec}"


def parse_content_type(value: str) -> WebContentType | None:
    match = _CONTENT_TYPE.match(value.split(";")[0].strip().lower())
    if match is None:
        return None
    return WebContentType(text=bool(match.group(1)), codec=match.group(2) or "proto")


def parse_timeout(value: str) -> float:
    """Seconds of a `grpc-timeout` header such as `10S`, `250m` or `1H`."""
    match = _TIMEOUT.match(value.strip())
    if match is None:
        raise FramingError(f"grpc-timeout {value!r} is not a number of at most 8 digits and a unit")
    return int(match.group(1)) * _TIMEOUT_UNITS[match.group(2)]


Frame = tuple[int, bytes]


class FrameDecoder:
    """Frames of a body that arrives in chunks split anywhere; binary or base64 text.

    A frame announcing more than `max_length` bytes is refused as soon as its header
    arrives, so an oversized request is never buffered.
    """

    def __init__(self, text: bool, max_length: int = MAX_FRAME_BYTES) -> None:
        self._text = text
        self._max_length = max_length
        self._base64 = bytearray()
        self._binary = bytearray()

    def feed(self, chunk: bytes) -> list[Frame]:
        if not self._text:
            self._binary += chunk
            return self._frames()
        self._base64 += _WHITESPACE.sub(b"", chunk)
        # Padded segments are whole quartets, so every complete quartet can be decoded now.
        ready = len(self._base64) - len(self._base64) % 4
        self._binary += _decode_base64(bytes(self._base64[:ready]))
        del self._base64[:ready]
        return self._frames()

    def finish(self) -> list[Frame]:
        """The last frames; raises FramingError if the body stopped inside one."""
        if self._base64:  # an unpadded tail
            self._binary += _b64(bytes(self._base64))
            self._base64.clear()
        frames = self._frames()
        if self._binary:
            if len(self._binary) < _HEADER.size:
                raise FramingError("the body ends inside a frame header")
            _, length = _HEADER.unpack_from(self._binary)
            raise FramingError(f"a frame announces {length} bytes but the body ends sooner")
        return frames

    def _frames(self) -> list[Frame]:
        frames: list[Frame] = []
        offset = 0
        while len(self._binary) - offset >= _HEADER.size:
            flag, length = _HEADER.unpack_from(self._binary, offset)
            if length > self._max_length:
                raise FrameTooLarge(length, self._max_length)
            end = offset + _HEADER.size + length
            if end > len(self._binary):
                break
            frames.append((flag, bytes(self._binary[offset + _HEADER.size : end])))
            offset = end
        del self._binary[:offset]
        return frames


def decode_text(body: bytes) -> bytes:
    """Decode concatenated padded base64 segments (one per frame, or one for all)."""
    compact = _WHITESPACE.sub(b"", body)
    aligned = len(compact) - len(compact) % 4
    tail = compact[aligned:]
    return _decode_base64(compact[:aligned]) + (_b64(tail) if tail else b"")


def _decode_base64(quartets: bytes) -> bytes:
    """Whole base64 quartets; a segment ends at its padding, the next starts after it."""
    return b"".join(_b64(segment) for segment in _SEGMENT_END.split(quartets) if segment)


def _b64(segment: bytes) -> bytes:
    try:
        return base64.b64decode(segment + b"=" * (-len(segment) % 4), validate=True)
    except binascii.Error:
        raise FramingError("the grpc-web-text body is not valid base64") from None


def parse_frames(data: bytes) -> list[Frame]:
    """The frames of a whole binary body."""
    decoder = FrameDecoder(text=False, max_length=2**32)
    return decoder.feed(data) + decoder.finish()


def single_message(frames: Iterable[Frame]) -> bytes:
    """The one request message of a unary or server-streaming call."""
    messages = []
    for flag, payload in frames:
        if flag & COMPRESSED_BIT:
            raise FramingError("compressed grpc-web frames are not supported")
        if flag & TRAILER_FLAG:
            continue
        messages.append(payload)
    if len(messages) != 1:
        raise FramingError(f"expected exactly one request message, got {len(messages)}")
    return messages[0]


def encode_frame(flag: int, payload: bytes, text: bool) -> bytes:
    frame = _HEADER.pack(flag, len(payload)) + payload
    return base64.b64encode(frame) if text else frame


def trailer_block(code: int, message: str, metadata: Iterable[tuple[str, str | bytes]]) -> bytes:
    lines = [f"grpc-status:{code}"]
    if message:
        # The gRPC spec percent-encodes grpc-message (anything outside printable ASCII, and %).
        lines.append(f"grpc-message:{percent_encode(message)}")
    for key, value in metadata:
        if key.startswith("grpc-") and key not in ("grpc-status-details-bin",):
            continue
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        lines.append(f"{key.lower()}:{value}")
    return ("\r\n".join(lines) + "\r\n").encode()


def percent_encode(message: str) -> str:
    return quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
