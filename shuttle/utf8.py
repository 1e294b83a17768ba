"""Text that encodes as UTF-8, as protobuf and every byte stream need it.

A Python str can hold lone surrogates: decoded with ``surrogateescape`` (file names), or
parsed from JSON that escapes half a pair ("\\ud83d"), as a model endpoint built on UTF-16
strings may send when it cuts its output between the two halves of an emoji. Such a string
cannot be encoded, so one reaching an event or a request would fail it, far from its cause.
"""

from __future__ import annotations

import json

import orjson


def ensure_utf8(text: str) -> str:
    """`text`, with split surrogate pairs rejoined and lone surrogates made U+FFFD."""
    if text.isascii():  # the common case, answered without encoding anything
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def utf8_size(text: str) -> int:
    """The bytes `text` takes in UTF-8, as protobuf and SQL count them. A lone surrogate is
    counted as three bytes rather than failing: a size is wanted here, not the text."""
    # An ASCII string's length is its UTF-8 size (and isascii is a flag check).
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def storable_text(text: str) -> str:
    """`text` as any SQL database stores it: valid UTF-8 (see `ensure_utf8`), and NUL, which
    PostgreSQL refuses in text (and so fails the rows written with it), as U+FFFD."""
    text = ensure_utf8(text)
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def json_bytes(value: object) -> bytes:
    """`value` as compact UTF-8 JSON: characters as they are, but a lone surrogate escaped,
    so parsed again it gives back `value` (orjson writes NaN and the infinities, which JSON
    lacks, as null)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        # orjson refuses a lone surrogate, an int beyond 64 bits, a key that is not a str;
        # json writes them all, its ASCII output escaping the surrogate. What neither can
        # write raises json's TypeError.
        return json.dumps(value, separators=(",", ":")).encode()


def json_text(value: object) -> str:
    """`json_bytes(value)` as a str, for protobuf fields and SSE frames."""
    return json_bytes(value).decode()


def _is_high_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


class StreamedText:
    """The pieces of one streamed text, each made valid UTF-8 as it is handed on.

    A piece ending in the first half of a surrogate pair keeps that half back and puts it
    before the next piece, so a pair cut between two pieces arrives as its character rather
    than as two U+FFFD.
    """

    def __init__(self) -> None:
        self._held = ""

    def piece(self, text: str) -> str:
        """What of `text` (after anything held back) can be handed on now."""
        text = self._held + text
        self._held = ""
        if text and _is_high_surrogate(text[-1]):
            self._held, text = text[-1], text[:-1]
        return ensure_utf8(text)

    def rest(self) -> str:
        """What is still held back, once the stream has ended ("" or U+FFFD)."""
        held, self._held = self._held, ""
        return ensure_utf8(held)
