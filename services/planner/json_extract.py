"""Finds a JSON value in free model text: fenced blocks, prose around it, small slips.

Hand-written because the job is narrower than a general JSON repairer: return a value the
model actually wrote (not a guess built from arbitrary text) or say clearly there is none.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_CANDIDATES = 200
"""Opening brackets tried per text, so hostile input cannot make extraction quadratic."""
MAX_REPAIRS = 50
MAX_REPAIR_SPAN = 20_000
"""Repairs are for small slips in model output: only so many, of bounded length, are tried."""

_FENCE = re.compile(r"```[ \t]*(?:json[c5]?|javascript|js)?[ \t]*\n?(.*?)```", re.S | re.I)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_PY_LITERAL = re.compile(r"\b(True|False|None)\b")
_STRING = re.compile(r'("(?:[^"\\]|\\.)*")', re.S)

_decoder = json.JSONDecoder()


class JSONExtractionError(ValueError):
    """No JSON value could be found in the text."""


def extract_json(text: str) -> Any:
    """The JSON object (preferred) or array in `text`; raises JSONExtractionError if none."""
    if not isinstance(text, str):
        raise JSONExtractionError(f"expected text, got {type(text).__name__}")
    stripped = text.strip()
    if not stripped:
        raise JSONExtractionError("the text is empty")
    whole = _loads(stripped)
    if isinstance(whole, dict | list):
        return whole
    for block in _FENCE.findall(text):
        found = _best_in(block)
        if found is not None:
            return found[0]
    found = _best_in(text)
    if found is not None:
        return found[0]
    raise JSONExtractionError("no JSON object found in the text")


def _best_in(text: str) -> tuple[Any] | None:
    """The longest object in `text` (else the longest array), exact or after small repairs."""
    best: tuple[bool, int, Any] | None = None
    starts = [m.start() for m in re.finditer(r"[{\[]", text)][:MAX_CANDIDATES]
    skip_until = -1
    for number, start in enumerate(starts):
        if start < skip_until:
            continue  # inside a value already found: its parts are never the answer
        value, end = _decode_at(text, start, repair=number < MAX_REPAIRS)
        if end < 0:
            continue
        rank = (isinstance(value, dict), end - start)
        if best is None or rank > best[:2]:
            best = (*rank, value)
        if isinstance(value, dict):
            # Objects inside an object are parts of it; objects inside an array stay
            # candidates, because an object is what callers want.
            skip_until = end
    return None if best is None else (best[2],)


def _decode_at(text: str, start: int, repair: bool) -> tuple[Any, int]:
    try:
        value, end = _decoder.raw_decode(text, start)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, dict | list):
            return value, end
    if not repair:
        return None, -1
    span_end = _balanced_end(text, start)
    if span_end < 0:
        return None, -1
    repaired = _repair(text[start:span_end])
    value = _loads(repaired) if repaired is not None else None
    if isinstance(value, dict | list):
        return value, span_end
    return None, -1


def _balanced_end(text: str, start: int) -> int:
    """Index just past the bracket closing the one at `start`; strings of either quote skipped."""
    depth = 0
    quote = ""
    escaped = False
    for index in range(start, min(len(text), start + MAX_REPAIR_SPAN)):
        ch = text[index]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return -1


def _repair(span: str) -> str | None:
    """Trailing commas, Python literals, and single quotes when no double quote is present.

    Only text outside string literals is touched: a value the model wrote stays as written.
    """
    fixed = span
    if '"' not in fixed and "'" in fixed:
        requoted = _requote(fixed)
        if requoted is None:
            return None
        fixed = requoted
    parts = _STRING.split(fixed)
    # re.split with one group alternates: code, string, code, string, ..., code.
    for index in range(0, len(parts), 2):
        code = _TRAILING_COMMA.sub(r"\1", parts[index])
        parts[index] = _PY_LITERAL.sub(lambda m: _PY_LITERALS[m.group(1)], code)
    return "".join(parts)


def _requote(span: str) -> str | None:
    """'a': 'b' → "a": "b"; None when an apostrophe makes the quoting ambiguous."""
    out: list[str] = []
    inside = False
    for index, ch in enumerate(span):
        if ch != "'":
            out.append(ch)
            continue
        if inside:
            following = span[index + 1 :].lstrip()[:1]
            if following and following not in ",:}]":
                return None  # an apostrophe inside a word: we cannot tell where strings end
            inside = False
        else:
            inside = True
        out.append('"')
    return None if inside else "".join(out)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return None
