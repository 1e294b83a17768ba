"""Fixtures for the tool host tests: real tools, including a few test-only ones as inputs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import grpc
import pytest

from services.tools.__main__ import service_for
from services.tools.builtins import default_tools
from services.tools.builtins.sandbox import Sandbox
from services.tools.catalog import ToolError, ToolOutput, ToolRegistry, ToolSpec
from services.tools.host import ToolHost
from shuttle.v1 import tools_pb2_grpc
from tests.tools.sandbox_support import prepared_sandbox

if TYPE_CHECKING:
    # Only the type stubs define the aio stub class; at run time ToolServiceStub serves both.
    from shuttle.v1.tools_pb2_grpc import ToolServiceAsyncStub


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sandbox: runs python_exec's bubblewrap container (.ci/run installs bwrap)"
    )


NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class Boom:
    """Crashes with an unexpected exception."""

    spec = ToolSpec(name="boom", description="Always crashes.", parameters=NO_ARGS, category="test")

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        raise RuntimeError("the widget fell over")


class Refuse:
    """Fails the way a tool should: with a ToolError the model can read."""

    spec = ToolSpec(
        name="refuse", description="Always refuses.", parameters=NO_ARGS, category="test"
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        raise ToolError("refuse: the upstream said no; try again with a smaller query")


class Hang:
    """Never finishes; its own short timeout ends it."""

    spec = ToolSpec(
        name="hang",
        description="Waits forever.",
        parameters=NO_ARGS,
        category="test",
        timeout_seconds=0.05,
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class InnerTimeout:
    """Raises TimeoutError from its own I/O, well before the host's deadline."""

    spec = ToolSpec(name="inner_timeout", description="Its backend times out.", parameters=NO_ARGS)

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        raise TimeoutError("backend did not answer")


class Sloppy:
    """Ignores its type hints and returns a bare string."""

    spec = ToolSpec(name="sloppy", description="Returns the wrong type.", parameters=NO_ARGS)

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        return cast(ToolOutput, "plain text")


class Repeat:
    """Returns `text` repeated `times` times: big outputs on demand."""

    spec = ToolSpec(
        name="repeat",
        description="Repeats text.",
        parameters={
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "times": {"type": "integer", "minimum": 1},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        category="text",
        read_only=True,
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        return ToolOutput(text=args["text"] * args.get("times", 1))


def extra_tools() -> list[Any]:
    return [Boom(), Refuse(), Hang(), InnerTimeout(), Sloppy(), Repeat()]


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([*default_tools(), *extra_tools()])


@pytest.fixture
def host(registry: ToolRegistry) -> ToolHost:
    return ToolHost(registry, default_timeout_seconds=30.0)


@pytest.fixture
async def channel(host: ToolHost) -> AsyncIterator[grpc.aio.Channel]:
    """A real aio server on a free loopback port serving `host`, and a channel to it."""
    service = service_for(host)
    port = await service.start("127.0.0.1", 0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as chan:
            yield chan
    finally:
        await service.stop(grace=0)


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> ToolServiceAsyncStub:
    # The stub's overloads cannot tell an aio channel apart while grpc itself is untyped.
    return tools_pb2_grpc.ToolServiceStub(channel)


@pytest.fixture
def sandbox() -> Sandbox:
    """python_exec's container; skips without bubblewrap locally, fails under CI."""
    return prepared_sandbox()
