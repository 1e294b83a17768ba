"""`text_utils`: counting and simple text transformations (no regular expressions, so no
catastrophic backtracking on model-supplied patterns)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

from services.tools.catalog import ToolError, ToolOutput, ToolSpec

MAX_INPUT_CHARS = 1_000_000
# The largest text an operation may build (case mappings and NFKD may lengthen a text, and
# 'replace' multiplies it); 'replace' is refused before building anything larger.
MAX_OUTPUT_CHARS = 1_000_000
_WORD = re.compile(r"\w+", re.UNICODE)


def _slug(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


def _bounded(operation: str, result: str) -> str:
    if len(result) > MAX_OUTPUT_CHARS:
        raise ToolError(
            f"text_utils: '{operation}' built {len(result):,} characters, over the limit of "
            f"{MAX_OUTPUT_CHARS:,} characters"
        )
    return result


class TextUtils:
    spec = ToolSpec(
        name="text_utils",
        description=(
            "Text helpers: 'count' characters/words/lines, 'upper', 'lower', 'title', "
            "'strip', 'replace' a literal substring, 'slugify', 'word_frequency' (top words), "
            "'reverse'."
        ),
        parameters={
            "type": "object",
            "properties": {
                "operation": {
                    "type": "string",
                    "enum": [
                        "count",
                        "upper",
                        "lower",
                        "title",
                        "strip",
                        "replace",
                        "slugify",
                        "word_frequency",
                        "reverse",
                    ],
                },
                "text": {"type": "string"},
                "old": {"type": "string", "description": "replace: the literal text to find"},
                "new": {"type": "string", "description": "replace: its replacement"},
                "top": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            "required": ["operation", "text"],
            "additionalProperties": False,
        },
        category="text",
        read_only=True,
        cacheable=True,
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        text: str = args["text"]
        if len(text) > MAX_INPUT_CHARS:
            raise ToolError(
                f"text_utils: the text has {len(text):,} characters, over the limit of "
                f"{MAX_INPUT_CHARS:,}"
            )
        operation = args["operation"]
        simple: dict[str, Callable[[str], str]] = {
            "upper": str.upper,
            "lower": str.lower,
            "title": str.title,
            "strip": str.strip,
            "slugify": _slug,
            "reverse": lambda value: value[::-1],
        }
        if operation in simple:
            return ToolOutput(text=_bounded(operation, simple[operation](text)))
        if operation == "count":
            counts = {
                "characters": len(text),
                "words": len(_WORD.findall(text)),
                "lines": len(text.splitlines()),
            }
            return ToolOutput(text=json.dumps(counts))
        if operation == "replace":
            if not args.get("old"):
                raise ToolError("text_utils: 'replace' needs a non-empty 'old'")
            old, new = args["old"], args.get("new", "")
            occurrences = text.count(old)
            size = len(text) + occurrences * (len(new) - len(old))
            if size > MAX_OUTPUT_CHARS:
                raise ToolError(
                    f"text_utils: 'replace' would build {size:,} characters ({occurrences:,} "
                    f"occurrences of {len(old):,} characters, each replaced by {len(new):,}), "
                    f"over the limit of {MAX_OUTPUT_CHARS:,} characters"
                )
            return ToolOutput(text=text.replace(old, new))
        top = Counter(word.lower() for word in _WORD.findall(text)).most_common(args.get("top", 10))
        return ToolOutput(text=json.dumps(dict(top), ensure_ascii=False))
