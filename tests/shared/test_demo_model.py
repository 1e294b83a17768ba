from __future__ import annotations

import pytest

from shuttle.llm.demo import CANNOT_HELP, DemoModel, find_expression

CALCULATOR = [{"type": "function", "function": {"name": "calculator", "parameters": {}}}]


@pytest.mark.parametrize(
    ("question", "expression"),
    [
        ("What is 12*7?", "12*7"),
        ("compute (3+4)^2 please", "(3+4)**2"),
        ("-3*2", "-3*2"),
        ("what is 5 - -2", "5 - -2"),
        ("how much is 10 / 4?", "10 / 4"),
        ("tell me a joke", None),
        ("in 2024 I was 30", None),
    ],
)
def test_find_expression(question: str, expression: str | None) -> None:
    assert find_expression(question) == expression


async def test_arithmetic_becomes_a_calculator_call_and_is_deterministic() -> None:
    model = DemoModel()
    messages = [{"role": "user", "content": "What is 12*7?"}]
    first = await model.chat(messages, CALCULATOR)
    again = await model.chat(messages, CALCULATOR)
    assert first == again
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("calculator", '{"expression": "12*7"}')
    assert first.usage.input_tokens > 0


async def test_without_the_calculator_or_arithmetic_it_says_what_it_cannot_do() -> None:
    model = DemoModel()
    no_tool = await model.chat([{"role": "user", "content": "What is 12*7?"}], [])
    no_math = await model.chat([{"role": "user", "content": "Write a poem"}], CALCULATOR)
    for result in (no_tool, no_math):
        assert result.tool_calls == ()
        assert result.content == CANNOT_HELP
    assert "[demo model]" in CANNOT_HELP and "OPENAI_BASE_URL" in CANNOT_HELP


async def test_the_streamed_answer_reads_the_trace_and_is_labelled() -> None:
    trace = 'Question: x\n\nSteps taken:\n1. calculator({"expression": "12*7"}) → 84\n'
    stream = DemoModel().stream_chat([{"role": "user", "content": trace}])
    parts = [part async for part in stream]
    assert "".join(parts) == "[demo model] 12*7 = 84"
    assert len(parts) > 1
    assert stream.result.content == "[demo model] 12*7 = 84"


async def test_a_failed_calculation_is_reported_not_invented() -> None:
    trace = '1. calculator({"expression": "1/0"}) → error: Error: division by zero\n'
    stream = DemoModel().stream_chat([{"role": "user", "content": trace}])
    answer = "".join([part async for part in stream])
    assert answer.startswith("[demo model] The calculator could not work that out")
