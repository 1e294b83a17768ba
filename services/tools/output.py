"""Shaping tool output for the wire and the model: valid UTF-8, bounded length."""

from __future__ import annotations

import unicodedata

from shuttle.utf8 import ensure_utf8

DEFAULT_MAX_OUTPUT_CHARS = 20_000

_ZWJ = "\u200d"
# How far a cut may move back to keep a character and its combining marks together.
_MAX_BACKOFF = 16


def _attaches_to_previous(char: str) -> bool:
    """Marks that render as part of the preceding character (accents, emoji modifiers)."""
    code = ord(char)
    return (
        unicodedata.combining(char) != 0
        or char == _ZWJ
        or 0xFE00 <= code <= 0xFE0F  # variation selectors (emoji vs text style)
        or 0x1F3FB <= code <= 0x1F3FF  # skin-tone modifiers
        or 0xE0020 <= code <= 0xE007F  # tag characters (subdivision flags)
    )


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut `text` to at most `limit` characters plus a note; returns (text, truncated).

    The cut is made on code points of a surrogate-free string, so the result always encodes
    as UTF-8 and never splits a multibyte character; it also backs off a few characters
    rather than separate a character from its combining marks or an emoji from its modifiers.
    """
    text = ensure_utf8(text)
    if len(text) <= limit:
        return text, False
    end = limit
    floor = max(0, limit - _MAX_BACKOFF)
    while end > floor and (_attaches_to_previous(text[end]) or text[end - 1] == _ZWJ):
        end -= 1
    if end == floor and floor > 0:
        end = limit  # a pathological run of marks: keep the plain cut rather than lose more
    note = f"\n…[truncated: {len(text):,} characters total, showing the first {end:,}]"
    return text[:end] + note, True
