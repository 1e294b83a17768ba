"""`calculator`: safe arithmetic on an explicit AST whitelist (no eval, exec or compile).

The expression is parsed with ``ast.parse(mode="eval")`` and walked node by node; only
numbers, arithmetic operators, a few math functions and constants are accepted. Anything
that could run code or burn unbounded CPU/memory is refused with a message that tells the
model what it may write instead.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from services.tools.catalog import ToolError, ToolOutput, ToolSpec

Number = int | float

MAX_EXPRESSION_CHARS = 500
# Counts expression nodes, which also bounds the recursion depth of the evaluator.
MAX_NODES = 300
# About 1,200 decimal digits: big enough for 2**1000, small enough to stay instant.
MAX_INT_BITS = 4000
MAX_ROUND_DIGITS = 100
SIGNIFICANT_DIGITS = 12

_FUNCTION_NAMES = "sqrt, abs, round, min, max, floor, ceil, log, log10, exp, sin, cos, tan"
_OPERATORS = "+ - * / // % ** and parentheses"
HELP = f"use numbers, {_OPERATORS}, functions {_FUNCTION_NAMES} and constants pi, e"

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}


def _round(x: Number, ndigits: Number | None = None) -> Number:
    """Round half away from zero, as people expect (Python's round() rounds half to even)."""
    if ndigits is None:
        places = 0
    elif isinstance(ndigits, int) and abs(ndigits) <= MAX_ROUND_DIGITS:
        places = ndigits
    else:
        raise ToolError(
            f"calculator: round() takes a whole number of digits between "
            f"-{MAX_ROUND_DIGITS} and {MAX_ROUND_DIGITS}, got {format_number(ndigits)}"
        )
    with localcontext() as ctx:
        # Enough precision for any allowed int or float plus the requested digits.
        ctx.prec = 2 * MAX_ROUND_DIGITS + MAX_INT_BITS
        ctx.rounding = ROUND_HALF_UP
        # repr() gives the shortest decimal that round-trips, so round(2.675, 2) is 2.68.
        exact = Decimal(x) if isinstance(x, int) else Decimal(repr(x))
        rounded = exact.quantize(Decimal(1).scaleb(-places))
    if isinstance(x, int) or places <= 0:
        return int(rounded)
    return float(rounded)


@dataclass(frozen=True)
class _Function:
    impl: Callable[..., Number]
    min_args: int
    max_args: int | None  # None: any number

    def arity(self) -> str:
        if self.max_args is None:
            return f"at least {self.min_args} argument{'s' if self.min_args != 1 else ''}"
        if self.min_args == self.max_args:
            return f"exactly {self.min_args} argument{'s' if self.min_args != 1 else ''}"
        return f"{self.min_args} to {self.max_args} arguments"


def _min(*args: Number) -> Number:
    return min(args)


def _max(*args: Number) -> Number:
    return max(args)


FUNCTIONS: dict[str, _Function] = {
    "sqrt": _Function(math.sqrt, 1, 1),
    "abs": _Function(abs, 1, 1),
    "round": _Function(_round, 1, 2),
    "min": _Function(_min, 1, None),
    "max": _Function(_max, 1, None),
    "floor": _Function(math.floor, 1, 1),
    "ceil": _Function(math.ceil, 1, 1),
    "log": _Function(math.log, 1, 2),
    "log10": _Function(math.log10, 1, 1),
    "exp": _Function(math.exp, 1, 1),
    "sin": _Function(math.sin, 1, 1),
    "cos": _Function(math.cos, 1, 1),
    "tan": _Function(math.tan, 1, 1),
}

_BINARY_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}

_REFUSED_OPERATORS: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' (use ** for powers)",
    ast.BitAnd: "operator '&'",
    ast.BitOr: "operator '|'",
    ast.LShift: "operator '<<'",
    ast.RShift: "operator '>>'",
    ast.MatMult: "operator '@'",
    ast.Invert: "operator '~'",
    ast.Not: "'not'",
}

# What to call a refused construct in the message; anything else uses its AST class name.
_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Lambda: "a lambda",
    ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a comprehension",
    ast.Compare: "a comparison",
    ast.BoolOp: "'and' / 'or'",
    ast.IfExp: "'if ... else'",
    ast.Subscript: "indexing",
    ast.Slice: "a slice",
    ast.Tuple: "a comma (write 1000, not 1,000; one expression per call)",
    ast.List: "a list",
    ast.Set: "a set",
    ast.Dict: "a dict",
    ast.JoinedStr: "text (an f-string)",
    ast.NamedExpr: "assignment (:=)",
    ast.Starred: "'*' unpacking",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}


def _refuse(what: str) -> ToolError:
    return ToolError(f"calculator: {what} is not allowed; {HELP}")


def _short(value: Number) -> str:
    text = format_number(value)
    return text if len(text) <= 30 else f"{text[:12]}…({len(text)} digits)"


def _too_large() -> ToolError:
    return ToolError(
        "calculator: the result is too large (integers are limited to about "
        f"{int(MAX_INT_BITS * math.log10(2)):,} digits, decimals to about 1.8e308)"
    )


def _checked(value: object) -> Number:
    """Accept only real, finite numbers of bounded size."""
    if isinstance(value, bool):
        raise _refuse("True/False")
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise _too_large()
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _too_large()
        return value
    if isinstance(value, complex):
        raise ToolError(
            "calculator: the result is a complex number (e.g. a fractional power of a "
            "negative number); only real numbers are supported"
        )
    raise ToolError(f"calculator: unexpected result type {type(value).__name__}")


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse integer powers whose result could not be held, before computing them."""
    if not (isinstance(base, int) and isinstance(exponent, int)) or exponent <= 0:
        return
    # (bits - 1) * exponent is a lower bound on the result's bit length.
    bits = (abs(base).bit_length() - 1) * exponent
    if abs(base) > 1 and bits > MAX_INT_BITS:
        raise ToolError(
            f"calculator: {_short(base)} ** {_short(exponent)} is too large to compute: at "
            f"least {_short(bits)} bits, over the limit of {MAX_INT_BITS:,} bits (about "
            f"{int(MAX_INT_BITS * math.log10(2)):,} digits)"
        )


class _Evaluator:
    def eval(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Expression):
            return self.eval(node.body)
        if isinstance(node, ast.Constant):
            return self._constant(node.value)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.UnaryOp):
            unary = _UNARY_OPS.get(type(node.op))
            if unary is None:
                raise _refuse(_REFUSED_OPERATORS.get(type(node.op), type(node.op).__name__))
            return _checked(unary(self.eval(node.operand)))
        if isinstance(node, ast.BinOp):
            return self._binary(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Attribute):
            raise _refuse(f"attribute access ('.{node.attr}')")
        raise _refuse(_REFUSED_NODES.get(type(node), type(node).__name__))

    def _constant(self, value: object) -> Number:
        if isinstance(value, str | bytes):
            raise _refuse(f"text ({value!r:.40})")
        if value is None or value is Ellipsis:
            raise _refuse(repr(value))
        if isinstance(value, complex):
            raise _refuse("an imaginary number")
        if isinstance(value, float) and not math.isfinite(value):
            raise _too_large()
        return _checked(value)

    def _name(self, name: str) -> Number:
        if name in CONSTANTS:
            return CONSTANTS[name]
        if name in FUNCTIONS:
            raise ToolError(f"calculator: {name} is a function; call it, e.g. {name}(2)")
        raise _refuse(f"name {name!r}")

    def _binary(self, node: ast.BinOp) -> Number:
        op = _BINARY_OPS.get(type(node.op))
        if op is None:
            raise _refuse(_REFUSED_OPERATORS.get(type(node.op), type(node.op).__name__))
        left, right = self.eval(node.left), self.eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _checked(op(left, right))
        except ZeroDivisionError:
            raise ToolError("calculator: division by zero") from None
        except OverflowError:
            raise _too_large() from None

    def _call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                raise _refuse(f"attribute access ('.{node.func.attr}')")
            raise _refuse("calling anything but a named function")
        name = node.func.id
        function = FUNCTIONS.get(name)
        if function is None:
            raise ToolError(
                f"calculator: function {name!r} is not allowed; "
                f"available functions: {_FUNCTION_NAMES}"
            )
        if node.keywords:
            raise _refuse(f"a keyword argument in {name}()")
        count = len(node.args)
        if count < function.min_args or (
            function.max_args is not None and count > function.max_args
        ):
            raise ToolError(f"calculator: {name}() takes {function.arity()}, got {count}")
        args = [self.eval(arg) for arg in node.args]
        try:
            return _checked(function.impl(*args))
        except ZeroDivisionError:
            raise ToolError(f"calculator: {name}() divided by zero") from None
        except OverflowError:
            raise _too_large() from None
        except ValueError:
            shown = ", ".join(_short(arg) for arg in args)
            raise ToolError(
                f"calculator: {name}({shown}) is undefined (outside the function's domain; "
                "only real numbers are supported)"
            ) from None


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression; any refusal or failure raises ToolError."""
    # Collapse whitespace so a model's multi-line expression parses (strings are refused
    # anyway, so no literal's content can change).
    text = " ".join(expression.split())
    if not text:
        raise ToolError(f"calculator: the expression is empty; {HELP}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(
            f"calculator: the expression is too long ({len(text):,} characters, "
            f"limit {MAX_EXPRESSION_CHARS}); split it into smaller calculations"
        )
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        problem = f"could not parse {text!r}: {exc.msg}{where}"
        raise ToolError(f"calculator: {problem}; {HELP}") from None
    except (ValueError, RecursionError, MemoryError):
        raise ToolError(f"calculator: could not parse {text!r}; {HELP}") from None
    nodes = sum(1 for node in ast.walk(tree) if isinstance(node, ast.expr))
    if nodes > MAX_NODES:
        raise ToolError(
            f"calculator: the expression has too many parts ({nodes}, limit {MAX_NODES}); "
            "split it into smaller calculations"
        )
    return _Evaluator().eval(tree)


def format_number(value: Number) -> str:
    """Integers exactly; floats to 12 significant digits, whole floats without '.0'."""
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"  # also turns -0.0 into "0"
    # Below 1e15 a whole float is exact, so print it as the integer it is.
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.{SIGNIFICANT_DIGITS}g}"


def calculate(expression: str) -> str:
    """Evaluate and format: the calculator tool's output text."""
    return format_number(evaluate(expression))


class Calculator:
    """The `calculator` tool."""

    spec = ToolSpec(
        name="calculator",
        description=(
            "Evaluate an arithmetic expression and return the result. Use it for any "
            "calculation rather than computing in your head."
        ),
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": (
                        "An arithmetic expression, e.g. 'sqrt(2) * (3 + 4) ** 2'. Supports "
                        "+ - * / // % ** and parentheses; functions sqrt, abs, round(x[, digits]), "
                        "min, max, floor, ceil, log(x[, base]) (natural by default), log10, exp, "
                        "sin, cos, tan (radians); constants pi and e. "
                        f"At most {MAX_EXPRESSION_CHARS} characters."
                    ),
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        },
        category="math",
        read_only=True,
        cacheable=True,
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        return ToolOutput(text=calculate(args["expression"]))
