"""ToolSpec validation and the ToolRegistry."""

from __future__ import annotations

from typing import Any

import pytest

from services.tools.builtins import default_tools
from services.tools.builtins.calculator import Calculator
from services.tools.catalog import DuplicateToolError, ToolRegistry, ToolSpec

NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def test_default_tools_include_the_calculator() -> None:
    assert [tool.spec.name for tool in default_tools()] == [
        "calculator",
        "datetime",
        "json_transform",
        "text_utils",
    ]


def test_register_get_and_duplicates() -> None:
    registry = ToolRegistry()
    registry.register(Calculator())
    assert "calculator" in registry
    assert len(registry) == 1
    tool = registry.get("calculator")
    assert tool is not None and tool.spec.name == "calculator"
    assert registry.get("nope") is None
    with pytest.raises(DuplicateToolError, match="'calculator' is already registered"):
        registry.register(Calculator())
    assert registry.names() == ["calculator"]


def test_list_filters(registry: ToolRegistry) -> None:
    all_names = [spec.name for spec in registry.list()]
    assert all_names == registry.names()
    assert all_names[0] == "calculator"  # registration order
    assert [s.name for s in registry.list(category="math")] == ["calculator"]
    assert {s.name for s in registry.list(category="test")} == {"boom", "refuse", "hang"}
    assert [s.name for s in registry.list(names=["repeat", "calculator", "missing"])] == [
        "calculator",
        "repeat",
    ]
    assert [s.name for s in registry.list(read_only_only=True)] == [
        "calculator",
        "datetime",
        "json_transform",
        "text_utils",
        "repeat",
    ]
    assert [s.name for s in registry.list(category="text", read_only_only=True)] == [
        "text_utils",
        "repeat",
    ]
    assert registry.list(category="math", names=["repeat"]) == []
    assert registry.list(category="nothing") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "has space"}, "tool name 'has space' is invalid"),
        ({"name": ""}, "tool name '' is invalid"),
        ({"name": "x" * 65}, "is invalid"),
        ({"parameters": {"type": "string"}}, "must be a JSON schema of type object"),
        ({"parameters": {"type": "object", "required": "x"}}, "invalid parameters schema"),
        ({"timeout_seconds": 0.0}, "timeout_seconds must be > 0"),
    ],
)
def test_spec_validation(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {"name": "ok", "description": "d", "parameters": NO_ARGS} | kwargs
    with pytest.raises(ValueError, match=message):
        ToolSpec(**fields)


def test_spec_defaults() -> None:
    spec = ToolSpec(name="ok", description="d", parameters=NO_ARGS)
    assert spec.category == "general"
    assert (spec.read_only, spec.requires_approval, spec.cacheable) == (False, False, False)
    assert spec.timeout_seconds is None
