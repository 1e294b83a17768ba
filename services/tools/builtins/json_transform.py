"""`json_transform`: query (JMESPath), reshape and inspect JSON documents."""

from __future__ import annotations

import json
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from services.tools.catalog import ToolError, ToolOutput, ToolSpec

MAX_INPUT_CHARS = 1_000_000


def _load(text: str) -> Any:
    if len(text) > MAX_INPUT_CHARS:
        raise ToolError(f"json_transform: the input is over {MAX_INPUT_CHARS:,} characters")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"json_transform: 'data' is not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno})"
        ) from None
    except RecursionError:
        raise ToolError("json_transform: 'data' is nested too deeply") from None


class JsonTransform:
    spec = ToolSpec(
        name="json_transform",
        description=(
            "Work with a JSON document: 'query' it with a JMESPath expression (e.g. "
            "'items[?price > `10`].name'), 'pretty' print, 'minify', list 'keys', or get its "
            "'type' and size."
        ),
        parameters={
            "type": "object",
            "properties": {
                "operation": {
                    "type": "string",
                    "enum": ["query", "pretty", "minify", "keys", "type"],
                },
                "data": {"type": "string", "description": "the JSON document, as text"},
                "expression": {"type": "string", "description": "JMESPath (query only)"},
            },
            "required": ["operation", "data"],
            "additionalProperties": False,
        },
        category="data",
        read_only=True,
        cacheable=True,
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        document = _load(args["data"])
        operation = args["operation"]
        if operation == "query":
            expression = args.get("expression", "")
            if not expression:
                raise ToolError("json_transform: 'query' needs 'expression'")
            try:
                result = jmespath.search(expression, document)
            except JMESPathError as exc:
                raise ToolError(f"json_transform: invalid JMESPath expression: {exc}") from None
            return ToolOutput(text=json.dumps(result, ensure_ascii=False, indent=2))
        if operation == "pretty":
            return ToolOutput(text=json.dumps(document, ensure_ascii=False, indent=2))
        if operation == "minify":
            return ToolOutput(text=json.dumps(document, ensure_ascii=False, separators=(",", ":")))
        if operation == "keys":
            if not isinstance(document, dict):
                raise ToolError("json_transform: 'keys' needs a JSON object")
            return ToolOutput(text=json.dumps(list(document), ensure_ascii=False))
        kind = type(document).__name__
        size = len(document) if isinstance(document, dict | list | str) else 1
        names = {"dict": "object", "list": "array", "str": "string", "NoneType": "null"}
        return ToolOutput(text=f"{names.get(kind, kind)} of size {size}")
