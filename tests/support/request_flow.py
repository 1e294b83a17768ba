"""The interpreter behind `request_reads`: it runs a handler's source over abstract values
(tests/support/request_values.py), recording each field of the request it reads."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator, Sequence

from google.protobuf.message import Message

from tests.support.request_values import (
    UNKNOWN,
    Bound,
    Closure,
    Code,
    Frame,
    Instance,
    Many,
    Msg,
    MsgMethod,
    Pair,
    Path,
    Py,
    Value,
    carries,
    closure_code,
    code_of,
    item_of,
    key,
    lookup,
    project_message,
)

# Message methods that read every field; calling any other loses the request.
_WHOLE_READS = frozenset({"ListFields", "SerializeToString", "SerializePartialToString"})
_PASS_THROUGH = (list, tuple, reversed, iter, aiter, set, frozenset)
_NEUTRAL = (len, bool, isinstance, id, type)
_CALLING_BACK = (map, filter, sorted, min, max)  # each item goes to the function given
_COMPREHENSIONS = ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp


def _is_one_of(target: object, options: Sequence[object]) -> bool:
    return any(target is option for option in options)


def _string_argument(node: ast.Call, index: int) -> str | None:
    argument = node.args[index] if len(node.args) > index else None
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    return None


def _own_nodes(stmt: ast.AST) -> Iterator[ast.AST]:
    """The statement and the statements inside it, short of the bodies of what it defines."""
    yield stmt
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return
    for child in ast.iter_child_nodes(stmt):
        if isinstance(child, ast.stmt | ast.ExceptHandler | ast.match_case):
            yield from _own_nodes(child)


class RequestFlow:
    """Follows one request through the code it reaches; what it read, read whole, lost."""

    def __init__(self) -> None:
        self.read: set[Path] = set()
        self.whole: set[Path] = set()
        self.lost: list[str] = []
        self._results: dict[object, Value | None] = {}
        self._running: set[object] = set()
        self._frames: list[Frame] = []  # alive while their ids key `_results`

    def invoke(
        self,
        code: Code,
        parent: Frame | None,
        positional: Sequence[Value | None],
        keywords: dict[str, Value | None],
    ) -> Value | None:
        """Follow a call into `code`; what it returns (what it yields, as a Many)."""
        call = (
            id(code.node),
            id(parent),
            tuple(key(v) for v in positional),
            tuple(sorted((k, key(v)) for k, v in keywords.items())),
        )
        if call in self._results or call in self._running:  # followed already, or recursion
            return self._results.get(call)
        self._running.add(call)
        frame = Frame(code, parent)
        self._frames.append(frame)
        self._bind(frame, code.node.args, positional, keywords)
        if isinstance(code.node, ast.Lambda):
            frame.returned.append(self.eval(code.node.body, frame))
        else:
            for node in (n for stmt in code.node.body for n in _own_nodes(stmt)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    frame.names[node.name] = Closure(node, frame)  # callable before its def
            self._block(code.node.body, frame)
        yielded = next((v for v in frame.yielded if v is not None), None)
        returned = next((v for v in frame.returned if v is not None), None)
        result = Many(yielded) if yielded is not None else returned
        self._running.discard(call)
        self._results[call] = result
        return result

    def _bind(
        self,
        frame: Frame,
        args: ast.arguments,
        positional: Sequence[Value | None],
        keywords: dict[str, Value | None],
    ) -> None:
        params = [a.arg for a in (*args.posonlyargs, *args.args)]
        named = [*params, *(a.arg for a in args.kwonlyargs)]
        for name in [*named, *(a.arg for a in (args.vararg, args.kwarg) if a is not None)]:
            frame.names[name] = UNKNOWN
        for index, value in enumerate(positional):
            if index < len(params):
                frame.names[params[index]] = value or UNKNOWN
            elif carries(value):
                self._lose(frame, frame.code.node, "takes the request as one of its *args")
        for name, value in keywords.items():
            if name in named:
                frame.names[name] = value or UNKNOWN
            elif carries(value):
                self._lose(frame, frame.code.node, f"takes the request in **kwargs as {name}")

    def _lose(self, frame: Frame, node: ast.AST, what: str) -> None:
        line = frame.code.line_offset + getattr(node, "lineno", 1)
        self.lost.append(f"{frame.code.file}:{line}: {what}")

    def _opaque(self, value: Value | None, where: ast.AST, frame: Frame) -> None:
        """The value goes into `where`, which the analysis cannot look through."""
        if carries(value):
            self._lose(frame, where, f"puts the request into {ast.unparse(where)[:60]!r}")
        else:
            self._call_back(value, None)

    def _call_back(self, value: Value | None, argument: Value | None) -> None:
        """A function handed on is called back: its own reads of the request count."""
        if isinstance(value, Closure):
            self.invoke(closure_code(value), value.frame, [argument], {})
        elif isinstance(value, Bound) and (code := code_of(value.function)) is not None:
            self.invoke(code, None, [value.owner, argument], {})

    def _block(self, body: list[ast.stmt], frame: Frame) -> None:
        for stmt in body:
            self._statement(stmt, frame)

    def _statement(self, stmt: ast.AST, frame: Frame) -> None:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            frame.names[stmt.name] = Closure(stmt, frame)
        elif isinstance(stmt, ast.ClassDef):
            frame.names[stmt.name] = UNKNOWN
        elif isinstance(stmt, ast.Assign):
            value = self.eval(stmt.value, frame)
            for target in stmt.targets:
                self._assign(target, value, frame)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
            if stmt.value is not None:
                self._assign(stmt.target, self.eval(stmt.value, frame), frame)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            self._assign(stmt.target, item_of(self.eval(stmt.iter, frame)), frame)
            self._block(stmt.body, frame)
            self._block(stmt.orelse, frame)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                self._opaque(self.eval(item.context_expr, frame), stmt, frame)
                if item.optional_vars is not None:
                    self._assign(item.optional_vars, None, frame)
            self._block(stmt.body, frame)
        elif isinstance(stmt, ast.Return):
            frame.returned.append(self.eval(stmt.value, frame) if stmt.value else None)
        elif isinstance(stmt, ast.ExceptHandler) and stmt.name:
            frame.names[stmt.name] = UNKNOWN
            self._block(stmt.body, frame)
        else:  # if, while, try, match, raise, expression statements: their parts in order
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.expr):
                    self.eval(child, frame)
                else:
                    self._statement(child, frame)

    def _assign(self, target: ast.expr, value: Value | None, frame: Frame) -> None:
        if isinstance(target, ast.Name):
            frame.names[target.id] = value or UNKNOWN
        elif isinstance(target, ast.Tuple | ast.List):
            items = value.items if isinstance(value, Pair) else ()
            for index, element in enumerate(target.elts):
                if isinstance(value, Many):
                    self._assign(element, value.item, frame)
                else:
                    same_shape = len(items) == len(target.elts)
                    self._assign(element, items[index] if same_shape else None, frame)
        else:
            self.eval(target, frame)
            if carries(value):
                self._lose(frame, target, f"stores the request in {ast.unparse(target)!r}")

    def eval(self, node: ast.expr, frame: Frame) -> Value | None:
        """The value of `node`; records the fields read on the way."""
        if isinstance(node, ast.Name):
            return lookup(node.id, frame)
        if isinstance(node, ast.Attribute):
            return self._attribute(self.eval(node.value, frame), node.attr)
        if isinstance(node, ast.Call):
            return self._call(node, frame)
        if isinstance(node, ast.Await):
            return self.eval(node.value, frame)
        if isinstance(node, ast.Subscript):
            base, _ = self.eval(node.value, frame), self.eval(node.slice, frame)
            if isinstance(base, Many):
                return base if isinstance(node.slice, ast.Slice) else base.item
            index = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if isinstance(base, Pair) and isinstance(index, int):
                return base.items[index]
            return None
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, frame)
            self._assign(node.target, value, frame)
            return value
        if isinstance(node, ast.IfExp):
            self.eval(node.test, frame)
            return self._either([node.body, node.orelse], frame)
        if isinstance(node, ast.BoolOp):
            return self._either(node.values, frame)
        if isinstance(node, ast.Tuple):
            items = tuple(self.eval(element, frame) for element in node.elts)
            return Pair(items) if any(v is not None for v in items) else None
        if isinstance(node, _COMPREHENSIONS):
            return self._comprehension(node, frame)
        if isinstance(node, ast.Lambda):
            return Closure(node, frame)
        if isinstance(node, ast.Yield | ast.YieldFrom):
            value = self.eval(node.value, frame) if node.value else None
            frame.yielded.append(item_of(value) if isinstance(node, ast.YieldFrom) else value)
            return None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                value = self.eval(child, frame)
                if not isinstance(node, ast.Compare | ast.UnaryOp | ast.Starred):
                    self._opaque(value, node, frame)  # a list, an f-string, arithmetic
        return None

    def _either(self, options: Sequence[ast.expr], frame: Frame) -> Value | None:
        values = [self.eval(option, frame) for option in options]
        return next((v for v in values if v is not None), None)

    def _comprehension(self, node: _COMPREHENSIONS, frame: Frame) -> Value | None:
        inner = Frame(frame.code, frame)
        self._frames.append(inner)
        for generator in node.generators:
            self._assign(generator.target, item_of(self.eval(generator.iter, inner)), inner)
            for condition in generator.ifs:
                self.eval(condition, inner)
        if isinstance(node, ast.DictComp):
            for part in (node.key, node.value):
                self._opaque(self.eval(part, inner), node, inner)
            return None
        element = self.eval(node.elt, inner)
        return Many(element) if element is not None else None

    def _attribute(self, base: Value | None, name: str) -> Value | None:
        if isinstance(base, Msg):
            fd = base.descriptor.fields_by_name.get(name)
            if fd is None:
                return MsgMethod(base, name)
            path = (*base.path, name)
            self.read.add(path)
            nested = project_message(fd)
            if nested is None:
                return None
            return Many(Msg(nested, path)) if fd.is_repeated else Msg(nested, path)
        if isinstance(base, Instance) or (isinstance(base, Py) and isinstance(base.obj, type)):
            cls = base.cls if isinstance(base, Instance) else base.obj
            assert isinstance(cls, type)
            found = inspect.getattr_static(cls, name, None)
            if isinstance(found, staticmethod):
                return Py(found.__func__)
            if isinstance(found, classmethod):
                return Bound(found.__func__, Py(cls))
            if inspect.isfunction(found):
                return Bound(found, base) if isinstance(base, Instance) else Py(found)
            return None  # an attribute of the instance: a collaborator the analysis cannot see
        if isinstance(base, Py) and inspect.ismodule(base.obj) and hasattr(base.obj, name):
            return Py(getattr(base.obj, name))
        return None

    def _call(self, node: ast.Call, frame: Frame) -> Value | None:
        callee = self.eval(node.func, frame)
        positional: list[Value | None] = []
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                self._opaque(self.eval(argument.value, frame), node, frame)
                positional.append(None)
            else:
                positional.append(self.eval(argument, frame))
        keywords: dict[str, Value | None] = {}
        for keyword in node.keywords:
            value = self.eval(keyword.value, frame)
            if keyword.arg is None:
                self._opaque(value, node, frame)
            else:
                keywords[keyword.arg] = value
        return self._apply(callee, positional, keywords, node, frame)

    def _apply(
        self,
        callee: Value | None,
        positional: list[Value | None],
        keywords: dict[str, Value | None],
        node: ast.Call,
        frame: Frame,
    ) -> Value | None:
        arguments = [*positional, *keywords.values()]
        first = positional[0] if positional else None
        if isinstance(callee, MsgMethod):
            return self._message_method(callee, node, frame)
        if isinstance(callee, Closure):
            return self.invoke(closure_code(callee), callee.frame, positional, keywords)
        followed = any(carries(v) or isinstance(v, Closure | Bound) for v in arguments)
        if isinstance(callee, Bound) and (code := code_of(callee.function)) is not None:
            return (
                self.invoke(code, None, [callee.owner, *positional], keywords) if followed else None
            )
        target = callee.obj if isinstance(callee, Py) else None
        if isinstance(target, type) and issubclass(target, Message):
            for value in arguments:  # a message built from parts of the request forwards them
                self._read_whole(value)
            return None
        if _is_one_of(target, (getattr, hasattr)) and (name := _string_argument(node, 1)):
            return self._attribute(first, name)
        if target is enumerate and isinstance(first, Many):
            return Many(Pair((None, first.item)))
        if target is zip:
            return Many(Pair(tuple(item_of(v) for v in positional)))
        if _is_one_of(target, _CALLING_BACK):
            many = next((v for v in positional if isinstance(v, Many)), None)
            for value in arguments:
                self._call_back(value, item_of(many))
            if target is map:
                return None
            return item_of(many) if _is_one_of(target, (min, max)) else many
        if _is_one_of(target, _PASS_THROUGH):
            return first
        if _is_one_of(target, (next, anext)):
            return item_of(first)
        if _is_one_of(target, _NEUTRAL):
            return None
        if inspect.isfunction(target) and (code := code_of(target)) is not None:
            return self.invoke(code, None, positional, keywords) if followed else None
        init = (
            inspect.getattr_static(target, "__init__", None) if isinstance(target, type) else None
        )
        if inspect.isfunction(init) and (code := code_of(init)) is not None:
            return self.invoke(code, None, [UNKNOWN, *positional], keywords) if followed else None
        passed = [*node.args, *(k.value for k in node.keywords if k.arg is not None)]
        for argument, value in zip(passed, arguments, strict=True):
            if carries(value):
                what = f"passes {ast.unparse(argument)!r} to {ast.unparse(node.func)!r}"
                self._lose(frame, node, f"{what}, whose source the analysis cannot read")
            else:
                self._call_back(value, None)
        return None

    def _message_method(self, method: MsgMethod, node: ast.Call, frame: Frame) -> Value | None:
        message = method.msg
        if method.name in _WHOLE_READS:
            self.whole.add(message.path)
            return None
        name = _string_argument(node, 0)
        oneof = message.descriptor.oneofs_by_name.get(name) if name else None
        if method.name in ("HasField", "WhichOneof") and oneof is not None:
            for fd in oneof.fields:  # the branches the function goes on to name
                if fd.name in frame.code.strings:
                    self.read.add((*message.path, fd.name))
        elif method.name == "HasField" and name and name in message.descriptor.fields_by_name:
            self.read.add((*message.path, name))
        else:
            self._lose(frame, node, f"calls {ast.unparse(node)[:60]!r} on the request")
        return None

    def _read_whole(self, value: Value | None) -> None:
        if isinstance(value, Msg):
            self.whole.add(value.path)
        elif isinstance(value, Many):
            self._read_whole(value.item)
        elif isinstance(value, Pair):
            for item in value.items:
                self._read_whole(item)
