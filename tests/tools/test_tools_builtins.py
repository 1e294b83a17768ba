"""The pure built-ins, file_ops confinement and artifacts, through ToolHost."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from services.tools.artifacts import ArtifactStore
from services.tools.builtins import BuiltinConfig, default_tools
from services.tools.catalog import ToolOutput, ToolRegistry, ToolSpec
from services.tools.host import ToolHost
from services.tools.workspace import Workspaces
from shuttle.tool_calls import ToolCall


class HtmlReport:
    spec = ToolSpec(
        name="report",
        description="Renders an HTML report.",
        parameters={"type": "object", "properties": {}},
    )

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        return ToolOutput(
            text="<html><body><h1>Q3</h1>" + "<p>row</p>" * 500 + "</body></html>",
            content_type="text/html",
            artifact_name="q3 report",
        )


@pytest.fixture
def workspaces(tmp_path: Path) -> Workspaces:
    return Workspaces(tmp_path / "ws", quota_bytes=1000)


@pytest.fixture
def host(workspaces: Workspaces) -> ToolHost:
    registry = ToolRegistry([*default_tools(BuiltinConfig(workspaces=workspaces)), HtmlReport()])
    return ToolHost(registry, artifacts=ArtifactStore(workspaces))


async def run(host: ToolHost, tool: str, workflow: str = "wf-1", **args: Any) -> Any:
    return await host.execute(
        ToolCall(
            tool_name=tool,
            arguments_json=json.dumps(args),
            workflow_id=workflow,
            tenant_id="acme",
            call_id="c1",
        )
    )


async def test_datetime(host: ToolHost) -> None:
    converted = await run(
        host, "datetime", operation="convert", time="2025-01-01T00:00:00Z", timezone="Asia/Tokyo"
    )
    assert converted.observation == "2025-01-01T09:00:00+09:00 (Wednesday)"
    added = await run(host, "datetime", operation="add", time="2024-02-28T12:00:00+00:00", days=1)
    assert added.observation.startswith("2024-02-29T12:00:00+00:00")
    diff = await run(
        host,
        "datetime",
        operation="diff",
        time="2025-01-01T00:00:00Z",
        other="2025-01-03T12:00:00Z",
    )
    assert diff.observation == "2 days 12 hours (216000 seconds)"
    bad = await run(host, "datetime", operation="now", timezone="Mars/Olympus")
    assert bad.error and "unknown time zone 'Mars/Olympus'" in bad.observation


async def test_json_transform(host: ToolHost) -> None:
    data = json.dumps({"items": [{"n": "a", "p": 5}, {"n": "b", "p": 20}]})
    found = await run(
        host, "json_transform", operation="query", data=data, expression="items[?p > `10`].n"
    )
    assert json.loads(found.observation) == ["b"]
    assert (
        await run(host, "json_transform", operation="keys", data=data)
    ).observation == '["items"]'
    broken = await run(host, "json_transform", operation="pretty", data="{nope")
    assert broken.error and "not valid JSON" in broken.observation
    bad_expr = await run(host, "json_transform", operation="query", data=data, expression="[?")
    assert bad_expr.error and "invalid JMESPath" in bad_expr.observation


async def test_text_utils(host: ToolHost) -> None:
    counted = await run(host, "text_utils", operation="count", text="one two\nthree")
    assert json.loads(counted.observation) == {"characters": 13, "words": 3, "lines": 2}
    assert (
        await run(host, "text_utils", operation="slugify", text="Héllo, World!")
    ).observation == ("hello-world")
    replaced = await run(host, "text_utils", operation="replace", text="a.b.c", old=".", new="/")
    assert replaced.observation == "a/b/c"


async def test_file_ops_round_trip_per_workflow(host: ToolHost) -> None:
    wrote = await run(host, "file_ops", operation="write", path="notes/a.txt", content="hello")
    assert wrote.ok
    await run(host, "file_ops", operation="append", path="notes/a.txt", content=" world")
    assert (await run(host, "file_ops", operation="read", path="notes/a.txt")).observation == (
        "hello world"
    )
    assert (
        "a.txt (11 B)" in (await run(host, "file_ops", operation="list", path="notes")).observation
    )
    # Another workflow has its own workspace.
    other = await run(host, "file_ops", operation="read", path="notes/a.txt", workflow="wf-2")
    assert other.error and "does not exist" in other.observation
    assert (await run(host, "file_ops", operation="delete", path="notes/a.txt")).ok
    assert (await run(host, "file_ops", operation="exists", path="notes/a.txt")).observation == "no"


@pytest.mark.parametrize(
    "path", ["../escape.txt", "notes/../../escape.txt", "/etc/passwd", "a/../../../../tmp/x"]
)
async def test_file_ops_refuses_traversal(host: ToolHost, path: str, tmp_path: Path) -> None:
    for operation in ("write", "read"):
        result = await run(host, "file_ops", operation=operation, path=path, content="x")
        assert result.error
        assert (
            "outside the workspace" in result.observation or "absolute path" in result.observation
        )
    assert not (tmp_path / "escape.txt").exists()


async def test_file_ops_refuses_symlink_escape(
    host: ToolHost, workspaces: Workspaces, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    await run(host, "file_ops", operation="write", path="seed.txt", content="x")
    root = tmp_path / "ws" / "acme" / "wf-1"
    os.symlink(secret, root / "link.txt")
    os.symlink(tmp_path, root / "dirlink")
    for path in ("link.txt", "dirlink/secret.txt"):
        read = await run(host, "file_ops", operation="read", path=path)
        assert read.error and "outside the workspace" in read.observation
        assert "top secret" not in read.observation
        written = await run(host, "file_ops", operation="write", path=path, content="pwned")
        assert written.error
    assert secret.read_text() == "top secret"


async def test_file_ops_quota(host: ToolHost) -> None:
    assert (await run(host, "file_ops", operation="write", path="a", content="x" * 600)).ok
    over = await run(host, "file_ops", operation="write", path="b", content="x" * 600)
    assert over.error and "quota of 1,000 bytes" in over.observation
    # Rewriting a file counts its new size, not both.
    assert (await run(host, "file_ops", operation="write", path="a", content="y" * 900)).ok


async def test_html_output_becomes_an_artifact(host: ToolHost, tmp_path: Path) -> None:
    result = await run(host, "report")
    assert result.observation.startswith("[Artifact generated: q3_report.html]")
    assert "<p>row</p>" not in result.observation
    [artifact] = result.artifacts
    assert artifact.mime_type == "text/html"
    assert artifact.uri == "workspace://artifacts/q3_report.html"
    stored = tmp_path / "ws" / "acme" / "wf-1" / "artifacts" / "q3_report.html"
    assert stored.read_text().count("<p>row</p>") == 500
    assert artifact.size_bytes == stored.stat().st_size
    # The content stays retrievable by the agent too.
    read = await run(host, "file_ops", operation="read", path="artifacts/q3_report.html")
    assert read.observation.startswith("<html><body><h1>Q3</h1>")
