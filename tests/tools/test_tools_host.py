"""ToolHost with real tools: every failure comes back as a result, never an exception."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from services.tools.builtins.calculator import Calculator
from services.tools.catalog import ToolRegistry
from services.tools.host import ToolHost
from shuttle.tool_calls import ToolCall, ToolOutcome


async def call(host: ToolHost, tool: str, arguments: object = None, **extra: Any) -> ToolOutcome:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return await host.execute(
        ToolCall(tool_name=tool, arguments_json=text, call_id="call-1", **extra)
    )


def assert_failed(result: ToolOutcome, *fragments: str) -> None:
    assert not result.ok
    assert result.error
    assert result.observation.startswith("Error: ")
    assert result.error in result.observation
    for fragment in fragments:
        assert fragment in result.observation, result.observation


async def test_calculator_success(host: ToolHost) -> None:
    result = await call(host, "calculator", {"expression": "12*7"}, workflow_id="wf-1")
    assert result.ok
    assert result.call_id == "call-1"
    assert result.observation == "84"
    assert result.error == ""
    assert (result.blocked, result.block_reason, result.truncated) == (False, "", False)
    assert result.artifacts == ()
    assert result.duration_ms >= 0


async def test_calculator_refusal_is_a_tool_error_result(host: ToolHost) -> None:
    result = await call(host, "calculator", {"expression": "().__class__"})
    assert_failed(result, "attribute access ('.__class__') is not allowed", "sqrt")
    assert result.error.startswith("calculator: ")


async def test_unknown_tool_lists_the_available_ones(host: ToolHost) -> None:
    result = await call(host, "calculater", {"expression": "1"})
    assert_failed(result, "unknown tool 'calculater'", "available tools: calculator, ")
    for name in host.registry.names():
        assert name in result.observation


async def test_unknown_tool_with_an_empty_catalog() -> None:
    result = await call(ToolHost(ToolRegistry()), "calculator", {})
    assert_failed(result, "available tools: (none)")


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        ('{"expression": ', ("not valid JSON", "line 1 column")),
        ("12*7", ("not valid JSON",)),
        ("'x'", ("not valid JSON",)),
        ('["12*7"]', ("must be a JSON object, got an array",)),
        ('"12*7"', ("must be a JSON object, got str",)),
        ("null", ("must be a JSON object, got NoneType",)),
        ("[" * 100_000, ("not valid JSON",)),  # nesting deep enough to hit the recursion limit
    ],
)
async def test_arguments_that_are_not_a_json_object(
    host: ToolHost, arguments: str, fragments: tuple[str, ...]
) -> None:
    result = await call(host, "calculator", arguments)
    hint = "send a JSON object with: expression (string, required)"
    assert_failed(result, "arguments for 'calculator'", *fragments, hint)


@pytest.mark.parametrize(
    ("arguments", "fragments"),
    [
        ({}, ("'expression' is a required property",)),
        ({"expression": 12}, ("field 'expression'", "12 is not of type 'string'")),
        (
            {"expression": "1", "precision": 3},
            ("Additional properties are not allowed ('precision' was unexpected)",),
        ),
    ],
)
async def test_schema_mismatch_names_the_field(
    host: ToolHost, arguments: dict[str, object], fragments: tuple[str, ...]
) -> None:
    result = await call(host, "calculator", arguments)
    assert_failed(
        result, "invalid arguments for 'calculator'", "expression (string, required)", *fragments
    )


async def test_empty_arguments_mean_an_empty_object(host: ToolHost) -> None:
    result = await call(host, "calculator", "")
    assert_failed(result, "'expression' is a required property")
    # A tool without parameters runs with no arguments at all.
    result = await call(host, "refuse", "")
    assert_failed(result, "refuse: the upstream said no")


async def test_schema_detail_is_clipped(host: ToolHost) -> None:
    result = await call(host, "repeat", {"text": "x", "times": "y" * 100_000})
    assert_failed(result, "field 'times'", "…")
    assert len(result.observation) < 1_000


async def test_tool_error_message_reaches_the_model(host: ToolHost) -> None:
    result = await call(host, "refuse")
    assert result.error == "refuse: the upstream said no; try again with a smaller query"
    assert result.observation == f"Error: {result.error}"


async def test_crashing_tool_is_contained_and_logged(
    host: ToolHost, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="services.tools.host"):
        result = await call(host, "boom", workflow_id="wf-9")
    assert result.error == "tool boom failed: RuntimeError: the widget fell over"
    assert result.observation == f"Error: {result.error}"
    [record] = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
    assert record.__dict__["tool_name"] == "boom"
    assert record.__dict__["workflow_id"] == "wf-9"


async def test_tool_timeout_uses_the_spec_timeout(host: ToolHost) -> None:
    result = await call(host, "hang")
    assert_failed(result, "tool 'hang' timed out after 0.05 seconds")


def test_default_timeout_applies_to_tools_without_their_own() -> None:
    registry = ToolRegistry()
    host = ToolHost(registry, default_timeout_seconds=7.5)
    assert host.timeout_for(Calculator.spec) == 7.5


async def test_a_tools_own_timeout_error_is_a_crash_not_our_deadline(host: ToolHost) -> None:
    result = await call(host, "inner_timeout")
    assert result.error == "tool inner_timeout failed: TimeoutError: backend did not answer"


async def test_a_wrong_return_type_is_an_error_result(host: ToolHost) -> None:
    result = await call(host, "sloppy")
    assert result.error == "tool 'sloppy' returned str, not ToolOutput text"


async def test_huge_output_is_truncated_utf8_safely(registry: ToolRegistry) -> None:
    host = ToolHost(registry)  # default limit: 20,000 characters
    # 123,456 characters with multibyte text and emoji straddling the cut at 20,000.
    text = "a" * 19_998 + "é😀🎉" + "ß" * (123_456 - 20_001)
    assert len(text) == 123_456
    result = await call(host, "repeat", {"text": text})
    assert result.ok
    assert result.truncated
    head, note = result.observation.split("\n", 1)
    assert head == "a" * 19_998 + "é😀"
    assert note == "…[truncated: 123,456 characters total, showing the first 20,000]"
    assert result.observation.encode("utf-8").decode("utf-8") == result.observation


async def test_output_limit_is_configurable(registry: ToolRegistry) -> None:
    host = ToolHost(registry, max_output_chars=5)
    result = await call(host, "repeat", {"text": "🙂", "times": 9})
    assert result.truncated
    assert result.observation == (
        "🙂" * 5 + "\n…[truncated: 9 characters total, showing the first 5]"
    )
    short = await call(host, "repeat", {"text": "🙂", "times": 5})
    assert (short.observation, short.truncated) == ("🙂" * 5, False)


def test_constructor_validation(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="max_output_chars"):
        ToolHost(registry, max_output_chars=0)
    with pytest.raises(ValueError, match="default_timeout_seconds"):
        ToolHost(registry, default_timeout_seconds=0)


def test_list_tools_filters(host: ToolHost) -> None:
    assert [s.name for s in host.list_tools(category="math")] == ["calculator"]
    assert [s.name for s in host.list_tools(names=["repeat"])] == ["repeat"]
    assert [s.name for s in host.list_tools(read_only_only=True)] == [
        "calculator",
        "datetime",
        "json_transform",
        "text_utils",
        "repeat",
    ]
    assert len(host.list_tools(tenant_id="acme")) == len(host.registry)
