"""What the request-reads analysis (`request_reads`) tracks: the parts of a request, the
functions it flows into, and the parsed source of those functions."""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

PACKAGE = "shuttle.v1"
_PROJECT_PACKAGES = frozenset({"services", "shuttle", "gateway", "tests", "bench"})
_ROOT = FilePath(__file__).resolve().parents[2]

Path = tuple[str, ...]
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass(frozen=True)
class Msg:
    """The request, or the message at `path` inside it."""

    descriptor: Descriptor
    path: Path


@dataclass(frozen=True)
class Many:
    """What iterates over `item`: a request stream, a repeated field, enumerate() of one."""

    item: Value


@dataclass(frozen=True)
class Pair:
    """A tuple some of whose items are tracked."""

    items: tuple[Value | None, ...]


@dataclass(frozen=True)
class MsgMethod:
    """A message's method (`HasField`, `WhichOneof`, ...), about to be called."""

    msg: Msg
    name: str


@dataclass(frozen=True)
class Instance:
    """`self` in a servicer's method: its class answers `self.helper`."""

    cls: type


@dataclass(frozen=True)
class Bound:
    """A method with the value its first parameter receives."""

    function: Callable[..., Any]
    owner: Value


@dataclass(frozen=True, eq=False)
class Py:
    """An object a module holds: a function, class or module the call resolves to."""

    obj: object


@dataclass(frozen=True, eq=False)
class Closure:
    """A function defined inside the analysed code, with the frame it sees."""

    node: FunctionNode
    frame: Frame


Value = Msg | Many | Pair | MsgMethod | Instance | Bound | Py | Closure
UNKNOWN = Py(object())
"""What a local name holds when it holds nothing tracked; it hides any global of that name."""


@dataclass(frozen=True, eq=False)
class Code:
    node: FunctionNode
    globals: dict[str, Any]
    file: str
    line_offset: int
    strings: frozenset[str]
    """The string constants of the whole function: the oneof branches it names."""


@dataclass(eq=False)
class Frame:
    code: Code
    parent: Frame | None
    names: dict[str, Value] = field(default_factory=dict)
    returned: list[Value | None] = field(default_factory=list)
    yielded: list[Value | None] = field(default_factory=list)


def project_message(fd: FieldDescriptor) -> Descriptor | None:
    """The field's message type when its fields are followed too: a `shuttle.v1` message."""
    nested = fd.message_type
    if nested is None or nested.file.package != PACKAGE or nested.GetOptions().map_entry:
        return None
    return nested


def carries(value: Value | None) -> bool:
    """Whether the value holds the request or a part of it."""
    if isinstance(value, Many):
        return carries(value.item)
    if isinstance(value, Pair):
        return any(carries(item) for item in value.items)
    return isinstance(value, Msg)


def item_of(value: Value | None) -> Value | None:
    return value.item if isinstance(value, Many) else None


def key(value: Value | None) -> object:
    """A hashable stand-in for the value, for remembering calls already followed."""
    if isinstance(value, Msg):
        return (value.descriptor.full_name, value.path)
    if isinstance(value, Many):
        return ("many", key(value.item))
    if isinstance(value, Pair):
        return tuple(key(item) for item in value.items)
    if isinstance(value, Closure):
        return (id(value.node), id(value.frame))
    if isinstance(value, Py):
        return id(value.obj)
    return value


def lookup(name: str, frame: Frame) -> Value | None:
    scope: Frame | None = frame
    while scope is not None:
        if name in scope.names:
            value = scope.names[name]
            return None if value is UNKNOWN else value
        scope = scope.parent
    if name in frame.code.globals:
        return Py(frame.code.globals[name])
    return Py(getattr(builtins, name)) if hasattr(builtins, name) else None


@functools.cache
def code_of(function: Callable[..., Any]) -> Code | None:
    """The parsed source of a function of the project; None for anything else."""
    function = inspect.unwrap(function)
    module = getattr(function, "__module__", "") or ""
    if module.split(".")[0] not in _PROJECT_PACKAGES or module.startswith(PACKAGE):
        return None
    try:
        lines, first = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):  # no source: generated or built in
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    path = FilePath(inspect.getsourcefile(function) or "?").resolve()
    file = str(path.relative_to(_ROOT)) if path.is_relative_to(_ROOT) else str(path)
    strings = frozenset(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )
    return Code(node, function.__globals__, file, first - 1, strings)


def closure_code(closure: Closure) -> Code:
    outer = closure.frame.code
    return Code(closure.node, outer.globals, outer.file, outer.line_offset, outer.strings)
