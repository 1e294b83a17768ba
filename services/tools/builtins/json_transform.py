"""`json_transform`: query (JMESPath), reshape and inspect JSON documents."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import jmespath
from jmespath.exceptions import JMESPathError
from jmespath.functions import Functions, signature
from jmespath.visitor import Options, TreeInterpreter

from services.tools.catalog import ToolError, ToolOutput, ToolSpec
from shuttle.tool_calls import DataProcessed
from shuttle.utf8 import utf8_size

if TYPE_CHECKING:
    from jmespath.visitor import _TreeNode  # only in the type stubs

MAX_INPUT_CHARS = 1_000_000
MAX_EXPRESSION_CHARS = 2_000
# The largest result, as JSON text: shared references make a few bytes of query print
# gigabytes ('[@,@,@,@] | [@,@,@,@] | …'), so the text is counted while it is written.
MAX_OUTPUT_CHARS = 1_000_000
# What one query may build: list items, object members and string characters made by
# projections, flattening, multiselects and functions, all counted together.
MAX_BUILT_VALUES = 2_000_000
# Nodes whose result is new (not part of the document), and so counted.
_BUILDING = {
    "projection",
    "value_projection",
    "filter_projection",
    "multi_select_list",
    "multi_select_dict",
    "function_expression",
}


class _Budget:
    def __init__(self) -> None:
        self.used = 0

    def charge(self, amount: int, what: str) -> None:
        self.used += amount
        if self.used > MAX_BUILT_VALUES:
            raise ToolError(
                f"json_transform: the query would build more than {MAX_BUILT_VALUES:,} values "
                f"and characters (the limit; {what} reached {self.used:,}); narrow the query"
            )


def json_size(value: Any, indent: int | None, limit: int) -> int:
    """The length of `value` as JSON text, counted without writing it; the count stops
    once it passes `limit`, so shared references cost at most `limit` steps."""
    item_separator = 1 if indent is None else 2  # "," ; ": " after a key (":" compact)
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack and total <= limit:
        item, depth = stack.pop()
        if isinstance(item, dict | list) and item:
            count = len(item)
            total += 2 + (count - 1)  # brackets and commas
            if indent is not None:  # a line per member, and one for the closing bracket
                total += count * (1 + indent * (depth + 1)) + 1 + indent * depth
            if isinstance(item, dict):
                total += sum(len(json.dumps(key, ensure_ascii=False)) for key in item)
                total += count * item_separator
                stack.extend((member, depth + 1) for member in item.values())
            else:
                stack.extend((member, depth + 1) for member in item)
        elif isinstance(item, dict | list):
            total += 2
        else:
            total += len(json.dumps(item, ensure_ascii=False))
    return total


def render(
    value: Any, *, indent: int | None = 2, limit: int = MAX_OUTPUT_CHARS, what: str = "the result"
) -> str:
    """`value` as JSON text, refused before it is written when it would pass `limit`."""
    size = json_size(value, indent, limit)
    if size > limit:
        raise ToolError(
            f"json_transform: {what} would be over the limit of {limit:,} characters of JSON "
            f"(at least {size:,}); narrow the query or select fewer fields"
        )
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators)


class _BoundedFunctions(Functions):
    """JMESPath's functions, with the ones that build strings counted before they do."""

    def __init__(self, budget: _Budget) -> None:
        super().__init__()
        self._budget = budget

    @signature({"types": []})
    def _func_to_string(self, arg: Any) -> str:
        if isinstance(arg, str):
            return arg
        room = MAX_BUILT_VALUES - self._budget.used
        self._budget.charge(json_size(arg, None, room), "to_string()")
        return render(arg, indent=None, limit=room)

    @signature({"types": ["string"]}, {"types": ["array-string"]})
    def _func_join(self, separator: str, array: list[str]) -> str:
        size = sum(map(len, array)) + len(separator) * max(0, len(array) - 1)
        self._budget.charge(size, "join()")
        return separator.join(array)


class _BoundedInterpreter(TreeInterpreter):
    """JMESPath's evaluator, counting what each step builds against one budget."""

    def __init__(self, budget: _Budget) -> None:
        super().__init__(Options(custom_functions=_BoundedFunctions(budget)))
        self._budget = budget

    def visit(self, node: _TreeNode, *args: Any, **kwargs: Any) -> Any:
        result = super().visit(node, *args, **kwargs)
        if node["type"] in _BUILDING and isinstance(result, list | dict | str):
            self._budget.charge(len(result), node["type"].replace("_", " "))
        return result

    def visit_flatten(self, node: _TreeNode, value: Any) -> Any:
        base = self.visit(node["children"][0], value)
        if not isinstance(base, list):
            return None
        # Counted before it is built: a list holding one list n times flattens to n copies.
        self._budget.charge(
            sum(len(item) if isinstance(item, list) else 1 for item in base), "flattening"
        )
        merged: list[Any] = []
        for item in base:
            if isinstance(item, list):
                merged.extend(item)
            else:
                merged.append(item)
        return merged


def query(expression: str, document: Any) -> Any:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(
            f"json_transform: the expression has {len(expression):,} characters, over the "
            f"limit of {MAX_EXPRESSION_CHARS:,}"
        )
    try:
        parsed = jmespath.compile(expression)
        return _BoundedInterpreter(_Budget()).visit(parsed.parsed, document)
    except JMESPathError as exc:
        raise ToolError(f"json_transform: invalid JMESPath expression: {exc}") from None


def _load(text: str) -> Any:
    if len(text) > MAX_INPUT_CHARS:
        raise ToolError(
            f"json_transform: the input has {len(text):,} characters, over the limit of "
            f"{MAX_INPUT_CHARS:,}"
        )
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
        records = len(document) if isinstance(document, dict | list) else 1
        processed = DataProcessed(
            operation=f"json_{operation}",
            bytes_processed=utf8_size(args["data"]),
            records_processed=records,
            total_records=records,
        )
        return ToolOutput(text=_transformed(operation, document, args), processed=processed)


def _transformed(operation: str, document: Any, args: dict[str, Any]) -> str:
    if operation == "query":
        expression = args.get("expression", "")
        if not expression:
            raise ToolError("json_transform: 'query' needs 'expression'")
        return render(query(expression, document))
    if operation == "pretty":
        return render(document)
    if operation == "minify":
        return render(document, indent=None)
    if operation == "keys":
        if not isinstance(document, dict):
            raise ToolError("json_transform: 'keys' needs a JSON object")
        return render(list(document), indent=None)
    kind = type(document).__name__
    size = len(document) if isinstance(document, dict | list | str) else 1
    names = {"dict": "object", "list": "array", "str": "string", "NoneType": "null"}
    return f"{names.get(kind, kind)} of size {size}"
