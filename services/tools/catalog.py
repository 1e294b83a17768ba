"""The tool catalog: what a tool is (spec + run) and the registry that holds them."""

from __future__ import annotations

import builtins
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from shuttle.tool_calls import Artifact, DataProcessed

# The names OpenAI-compatible function calling accepts; a tool the model cannot name is useless.
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolError(Exception):
    """A failure the model can act on; its message is shown to the model as the observation."""


class DuplicateToolError(ValueError):
    """A tool with the same name is already registered."""


@dataclass(frozen=True)
class ToolSpec:
    """What the model and clients see of a tool: name, JSON-schema parameters and flags.

    `timeout_seconds` of None means "the host's default timeout".
    """

    name: str
    description: str
    # JSON Schema of the arguments object. Treat as read-only once the spec is built.
    parameters: dict[str, Any] = field(hash=False)
    category: str = "general"
    read_only: bool = False
    requires_approval: bool = False
    cacheable: bool = False
    timeout_seconds: float | None = None

    def __post_init__(self) -> None:
        if not _NAME_RE.fullmatch(self.name):
            raise ValueError(
                f"tool name {self.name!r} is invalid: use 1-64 letters, digits, '_' or '-'"
            )
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise ValueError(f"tool {self.name!r}: timeout_seconds must be > 0 or None")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type object")
        try:
            validator_for(self.parameters).check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(
                f"tool {self.name!r}: invalid parameters schema: {exc.message}"
            ) from exc


@dataclass(frozen=True)
class ToolOutput:
    """What a tool returns: text for the model, plus any artifacts."""

    text: str
    artifacts: tuple[Artifact, ...] = ()
    # text/html or text/markdown output is stored as an artifact rather than shown whole.
    content_type: str = "text/plain"
    # A file name for that artifact; derived from the tool and call when empty.
    artifact_name: str = ""
    processed: DataProcessed | None = None
    """For a tool that works through data: how much it did."""


class Tool(Protocol):
    """A runnable tool. `run` receives arguments already validated against `spec.parameters`."""

    @property
    def spec(self) -> ToolSpec: ...

    async def run(self, args: dict[str, Any]) -> ToolOutput: ...


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; a second tool with the same name raises DuplicateToolError."""
        name = tool.spec.name
        if name in self._tools:
            raise DuplicateToolError(f"a tool named {name!r} is already registered")
        self._tools[name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> builtins.list[str]:
        return builtins.list(self._tools)

    def list(
        self,
        *,
        category: str = "",
        names: Collection[str] = (),
        read_only_only: bool = False,
    ) -> builtins.list[ToolSpec]:
        """Specs matching every given filter; an empty filter matches everything."""
        wanted = set(names)
        return [
            tool.spec
            for tool in self._tools.values()
            if (not category or tool.spec.category == category)
            and (not wanted or tool.spec.name in wanted)
            and (not read_only_only or tool.spec.read_only)
        ]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)
