"""The calculator: results, formatting, and every refusal with a message the model can use."""

from __future__ import annotations

import math

import pytest

from services.tools.builtins.calculator import (
    MAX_EXPRESSION_CHARS,
    Calculator,
    calculate,
    evaluate,
    format_number,
)
from services.tools.catalog import ToolError


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("12*7", "84"),
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 3 ** 2", "512"),  # right-associative
        ("-2 ** 2", "-4"),  # ** binds tighter than unary minus
        ("(-2) ** 2", "4"),
        ("10 - 4 - 3", "3"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("+5", "5"),
        ("84 / 2", "42"),  # a whole float prints without ".0"
        ("1 / 3", "0.333333333333"),
        ("0.1 + 0.2", "0.3"),
        ("2.5 * 4", "10"),
        ("1e3", "1000"),
        ("1_000_000 * 3", "3000000"),
        ("-0.0", "0"),
        ("2 ** 0.5", "1.41421356237"),
        ("2 ** -1", "0.5"),
        ("1e20", "1e+20"),
        ("2 ** 100", "1267650600228229401496703205376"),  # integers stay exact
        ("  3 +\n 4 ", "7"),
    ],
)
def test_arithmetic(expression: str, expected: str) -> None:
    assert calculate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.41421356237"),
        ("abs(-3.5)", "3.5"),
        ("round(2.5)", "3"),  # half away from zero, as people expect
        ("round(-2.5)", "-3"),
        ("round(2.675, 2)", "2.68"),
        ("round(1234, -2)", "1200"),
        ("min(3, 1, 2)", "1"),
        ("max(3, 1, 2)", "3"),
        ("max(4)", "4"),
        ("floor(2.7)", "2"),
        ("ceil(2.1)", "3"),
        ("floor(-2.5)", "-3"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("log10(1000)", "3"),
        ("exp(0)", "1"),
        ("sin(0)", "0"),
        ("cos(pi)", "-1"),
        ("tan(pi / 4)", "1"),
        ("pi", "3.14159265359"),
        ("e", "2.71828182846"),
        ("2 * pi * 3", "18.8495559215"),
        ("sqrt(3 ** 2 + 4 ** 2)", "5"),
    ],
)
def test_functions_and_constants(expression: str, expected: str) -> None:
    assert calculate(expression) == expected


def test_evaluate_returns_numbers() -> None:
    assert evaluate("12*7") == 84
    assert isinstance(evaluate("12*7"), int)
    assert evaluate("1/4") == 0.25
    assert math.isclose(evaluate("sin(pi/6)"), 0.5)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(84, "84"), (84.0, "84"), (0.30000000000000004, "0.3"), (-0.0, "0"), (1e16, "1e+16")],
)
def test_format_number(value: float, expected: str) -> None:
    assert format_number(value) == expected


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("x + 1", "name 'x' is not allowed"),
        ("__import__", "name '__import__' is not allowed"),
        ("().__class__", "attribute access ('.__class__') is not allowed"),
        ("(1).real", "attribute access ('.real') is not allowed"),
        ("math.sqrt(4)", "attribute access ('.sqrt') is not allowed"),
        ("eval('1+1')", "function 'eval' is not allowed"),
        ("__import__('os').system('true')", "attribute access ('.system') is not allowed"),
        ("open('/etc/passwd')", "function 'open' is not allowed"),
        ("(lambda: 1)()", "calling anything but a named function is not allowed"),
        ("lambda: 1", "a lambda is not allowed"),
        ("[x for x in (1, 2)]", "a comprehension is not allowed"),
        ("sum(x for x in (1, 2))", "function 'sum' is not allowed"),
        ("{x: 1 for x in (1,)}", "a comprehension is not allowed"),
        ("'abc'", "text ('abc') is not allowed"),
        ("'a' * 10", "text ('a') is not allowed"),
        ("f'{1}'", "text (an f-string) is not allowed"),
        ("b'x'", "text (b'x') is not allowed"),
        ("True + 1", "True/False is not allowed"),
        ("None", "None is not allowed"),
        ("1j", "an imaginary number is not allowed"),
        ("2 ^ 3", "'^' (use ** for powers) is not allowed"),
        ("1 << 1000", "operator '<<' is not allowed"),
        ("~1", "operator '~' is not allowed"),
        ("1 < 2", "a comparison is not allowed"),
        ("1 and 2", "'and' / 'or' is not allowed"),
        ("1 if 1 else 2", "'if ... else' is not allowed"),
        ("1,000", "a comma (write 1000, not 1,000"),
        ("[1, 2][0]", "indexing is not allowed"),
        ("(y := 2)", "assignment (:=) is not allowed"),
        ("round(2.5, ndigits=1)", "a keyword argument in round() is not allowed"),
        ("sqrt", "sqrt is a function; call it"),
    ],
)
def test_refusals_name_the_problem_and_the_alternative(expression: str, fragment: str) -> None:
    with pytest.raises(ToolError) as caught:
        calculate(expression)
    message = str(caught.value)
    assert message.startswith("calculator: ")
    assert fragment in message
    # Every refusal points at what the model may use instead.
    assert "sqrt" in message


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("10**10**10", "10 ** 10000000000 is too large to compute"),
        ("9 ** 9 ** 9", "is too large to compute"),
        ("(2 ** 3000) ** 2", "is too large to compute"),
        ("3 ** 2600", "the result is too large"),  # passes the estimate, caught on the result
        ("(2 ** 3900) * (2 ** 3900)", "the result is too large"),
        ("1e308 * 10", "the result is too large"),
        ("1e999", "the result is too large"),
        ("2.0 ** 10000", "the result is too large"),
        ("exp(1000)", "the result is too large"),
        ("(2 ** 3000) / 3.0", "the result is too large"),
        ("1 / 0", "division by zero"),
        ("1 // 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("1.5 / 0.0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("log(10, 1)", "log() divided by zero"),
        ("sqrt(-1)", "sqrt(-1) is undefined"),
        ("log(0)", "log(0) is undefined"),
        ("(-8) ** (1/3)", "complex number"),
        ("round(2.5, 0.5)", "round() takes a whole number of digits"),
        ("round(5, -1000000000)", "round() takes a whole number of digits"),
        ("min()", "min() takes at least 1 argument, got 0"),
        ("sqrt(1, 2)", "sqrt() takes exactly 1 argument, got 2"),
        ("log(1, 2, 3)", "log() takes 1 to 2 arguments, got 3"),
        ("", "the expression is empty"),
        ("   ", "the expression is empty"),
        ("12 x 7", "could not parse '12 x 7'"),
        ("(1 + 2", "could not parse"),
        ("1; import os", "could not parse"),
        ("1\x00", "could not parse"),
        ("(" * 210 + "1" + ")" * 210, "could not parse"),  # parser nesting limit
    ],
)
def test_failures_explain_what_went_wrong(expression: str, fragment: str) -> None:
    with pytest.raises(ToolError, match=r"^calculator: ") as caught:
        calculate(expression)
    assert fragment in str(caught.value)


def test_too_long() -> None:
    expression = "1+" * (MAX_EXPRESSION_CHARS // 2) + "1"
    with pytest.raises(ToolError) as caught:
        calculate(expression)
    assert f"too long ({len(expression):,} characters, limit {MAX_EXPRESSION_CHARS})" in str(
        caught.value
    )


def test_too_many_nodes_within_the_length_limit() -> None:
    expression = "1+" * 200 + "1"
    assert len(expression) <= MAX_EXPRESSION_CHARS
    with pytest.raises(ToolError, match="too many parts"):
        calculate(expression)


def test_deep_unary_chain_is_refused_not_a_crash() -> None:
    with pytest.raises(ToolError, match="too many parts"):
        calculate("-" * 450 + "1")


def test_the_largest_allowed_power_still_works() -> None:
    assert calculate("2 ** 1000") == str(2**1000)


async def test_tool_spec_and_run() -> None:
    tool = Calculator()
    assert tool.spec.name == "calculator"
    assert tool.spec.category == "math"
    assert tool.spec.read_only is True
    assert tool.spec.parameters["required"] == ["expression"]
    assert tool.spec.parameters["additionalProperties"] is False
    assert tool.spec.parameters["properties"]["expression"]["type"] == "string"
    output = await tool.run({"expression": "12*7"})
    assert output.text == "84"
    assert output.artifacts == ()
