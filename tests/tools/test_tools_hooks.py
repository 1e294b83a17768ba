"""The hook chain around ToolHost.execute: ordering, blocking, rewriting, failing, filters."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from services.tools.buckets import MemoryBuckets
from services.tools.catalog import ToolRegistry
from services.tools.hooks.base import (
    ALLOW,
    CallRecord,
    Hook,
    HookContext,
    PostResult,
    PreResult,
    block,
    rewrite,
)
from services.tools.hooks.chain import HookChain
from services.tools.hooks.config import HooksConfigError, build_chain, load_hooks_config
from services.tools.hooks.policy import DenyHook, RedactHook, SetArgumentsHook
from services.tools.hooks.read_only import ReadOnlyGuard
from services.tools.hooks.truncation import TruncationHook
from services.tools.host import ToolHost
from shuttle.tool_calls import ToolCall


@dataclass(kw_only=True)
class Recorder(Hook):
    """Notes when it runs; optionally blocks, rewrites, raises or edits the observation."""

    journal: list[str]
    fail_closed: bool = True
    verdict: PreResult = ALLOW
    raise_in: str = ""
    suffix: str = ""
    seen_args: list[dict[str, Any]] = field(default_factory=list)
    seen_records: list[CallRecord] = field(default_factory=list)

    async def pre(self, ctx: HookContext) -> PreResult:
        self.journal.append(f"pre:{self.name}")
        self.seen_args.append(ctx.arguments)
        if self.raise_in == "pre":
            raise RuntimeError(f"{self.name} broke")
        return self.verdict

    async def post(self, ctx: HookContext, record: CallRecord) -> PostResult | None:
        self.journal.append(f"post:{self.name}")
        self.seen_records.append(record)
        if self.raise_in == "post":
            raise RuntimeError(f"{self.name} broke")
        return PostResult(observation=record.observation + self.suffix) if self.suffix else None


def make_host(registry: ToolRegistry, *hooks: Hook) -> ToolHost:
    return ToolHost(registry, hooks=HookChain(hooks))


def call(tool: str, tenant: str = "t1", read_only: bool = False, **args: Any) -> ToolCall:
    return ToolCall(
        tool_name=tool,
        arguments_json=json.dumps(args),
        call_id="c1",
        workflow_id="wf-1",
        tenant_id=tenant,
        read_only=read_only,
    )


async def test_hooks_run_in_priority_order_then_config_order(registry: ToolRegistry) -> None:
    journal: list[str] = []
    hooks = [
        Recorder(name="late", priority=90, journal=journal),
        Recorder(name="first", priority=5, journal=journal),
        Recorder(name="tie-a", priority=50, journal=journal),
        Recorder(name="tie-b", priority=50, journal=journal),
    ]
    result = await make_host(registry, *hooks).execute(call("calculator", expression="1+1"))
    assert result.observation == "2"
    order = ["first", "tie-a", "tie-b", "late"]
    assert journal == [f"pre:{n}" for n in order] + [f"post:{n}" for n in order]


async def test_a_block_stops_the_call_and_later_pre_hooks(registry: ToolRegistry) -> None:
    journal: list[str] = []
    blocker = Recorder(name="guard", priority=1, journal=journal, verdict=block("not today"))
    after = Recorder(name="after", priority=2, journal=journal)
    result = await make_host(registry, blocker, after).execute(call("repeat", text="x"))
    assert result.blocked and result.block_reason == "not today"
    assert result.observation == "Blocked: not today"
    assert not result.error
    # The tool never ran and the later hook's pre never ran; post hooks skip blocked calls.
    assert journal == ["pre:guard"]


async def test_rewritten_arguments_feed_later_hooks_and_the_tool(registry: ToolRegistry) -> None:
    journal: list[str] = []
    rewriter = Recorder(
        name="rw", priority=1, journal=journal, verdict=rewrite({"text": "ab", "times": 3})
    )
    watcher = Recorder(name="watch", priority=2, journal=journal)
    result = await make_host(registry, rewriter, watcher).execute(call("repeat", text="zz"))
    assert result.observation == "ababab"
    assert watcher.seen_args == [{"text": "ab", "times": 3}]


async def test_a_rewrite_that_breaks_the_schema_is_an_error(registry: ToolRegistry) -> None:
    bad = SetArgumentsHook(values={"times": "many"})
    result = await make_host(registry, bad).execute(call("repeat", text="a"))
    assert result.error
    assert "rewrote the arguments" in result.observation
    assert "times" in result.observation


async def test_post_hooks_rewrite_in_turn_and_see_the_full_output(registry: ToolRegistry) -> None:
    journal: list[str] = []
    one = Recorder(name="one", priority=1, journal=journal, suffix="+1")
    two = Recorder(name="two", priority=2, journal=journal, suffix="+2")
    result = await make_host(registry, one, two).execute(call("repeat", text="x"))
    assert result.observation == "x+1+2"
    assert two.seen_records[0].observation == "x+1"
    assert two.seen_records[0].full_output == "x"


async def test_failing_security_pre_hook_blocks(registry: ToolRegistry) -> None:
    journal: list[str] = []
    broken = Recorder(name="sec", journal=journal, fail_closed=True, raise_in="pre")
    result = await make_host(registry, broken).execute(call("repeat", text="x"))
    assert result.blocked
    assert "policy check 'sec' failed" in result.block_reason


async def test_failing_advisory_pre_hook_is_skipped(registry: ToolRegistry) -> None:
    journal: list[str] = []
    broken = Recorder(name="adv", journal=journal, fail_closed=False, raise_in="pre")
    result = await make_host(registry, broken).execute(call("repeat", text="x"))
    assert result.ok and result.observation == "x"


async def test_failing_security_post_hook_withholds_the_result(registry: ToolRegistry) -> None:
    journal: list[str] = []
    broken = Recorder(name="sec", journal=journal, fail_closed=True, raise_in="post")
    later = Recorder(name="later", priority=200, journal=journal)
    result = await make_host(registry, broken, later).execute(call("repeat", text="secret"))
    assert "secret" not in result.observation
    assert "withheld" in result.error
    # Later hooks (an audit log, say) still see the call.
    assert later.seen_records[0].error == result.error


async def test_failing_advisory_post_hook_leaves_the_result(registry: ToolRegistry) -> None:
    journal: list[str] = []
    broken = Recorder(name="adv", journal=journal, fail_closed=False, raise_in="post")
    result = await make_host(registry, broken).execute(call("repeat", text="fine"))
    assert result.ok and result.observation == "fine"


async def test_globs_and_tenants_filter_hooks(registry: ToolRegistry) -> None:
    journal: list[str] = []
    hooks = [
        Recorder(name="rep", tools=("rep*",), journal=journal),
        Recorder(name="calc", tools=("calculator",), journal=journal),
        Recorder(name="acme", tenants=("acme",), journal=journal),
    ]
    host = make_host(registry, *hooks)
    await host.execute(call("repeat", text="x", tenant="other"))
    assert journal == ["pre:rep", "post:rep"]
    journal.clear()
    await host.execute(call("calculator", expression="2", tenant="acme"))
    assert journal == ["pre:calc", "pre:acme", "post:calc", "post:acme"]


async def test_observe_blocked_hooks_see_blocked_calls(registry: ToolRegistry) -> None:
    journal: list[str] = []
    auditor = Recorder(name="audit", priority=99, journal=journal, observe_blocked=True)
    result = await make_host(registry, DenyHook(reason="no"), auditor).execute(
        call("repeat", text="x")
    )
    assert result.blocked
    [record] = auditor.seen_records
    assert record.blocked and record.blocked_by == "deny" and record.outcome == "blocked"


async def test_read_only_guard(registry: ToolRegistry) -> None:
    guard = ReadOnlyGuard(read_only_tenants=frozenset({"auditors"}))
    host = make_host(registry, guard)
    # `boom` is not read_only; `repeat` is.
    workflow_ro = await host.execute(call("boom", read_only=True))
    assert workflow_ro.blocked and "this workflow is in read-only mode" in workflow_ro.block_reason
    tenant_ro = await host.execute(call("boom", tenant="auditors"))
    assert tenant_ro.blocked and "organisation" in tenant_ro.block_reason
    assert (await host.execute(call("repeat", text="ok", read_only=True))).observation == "ok"
    assert not (await host.execute(call("boom"))).blocked


async def test_truncation_caps_the_observation(registry: ToolRegistry) -> None:
    journal: list[str] = []
    auditor = Recorder(name="audit", priority=1000, journal=journal)
    host = make_host(registry, TruncationHook(max_chars=10), auditor)
    result = await host.execute(call("repeat", text="abc", times=100))
    assert result.truncated
    assert result.observation.startswith("abcabcabca\n…[truncated: 300 characters")
    assert auditor.seen_records[0].full_output == "abc" * 100


async def test_redact_rewrites_the_observation(registry: ToolRegistry) -> None:
    redact = RedactHook(pattern=r"sk-[a-z0-9]+", replacement="[key]")
    result = await make_host(registry, redact).execute(call("repeat", text="key sk-abc123 end"))
    assert result.observation == "key [key] end"


def test_invalid_hook_options_are_refused() -> None:
    with pytest.raises(ValueError, match="invalid pattern"):
        RedactHook(pattern="(")
    with pytest.raises(ValueError, match="max_chars"):
        TruncationHook(max_chars=0)


async def test_hooks_file_builds_deployment_and_tenant_hooks(
    tmp_path: Path, registry: ToolRegistry
) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text(
        """
read_only_tenants: [auditors]
hooks:
  - kind: deny
    tools: ["boom"]
    reason: boom is retired
  - kind: set_arguments
    tools: ["repeat"]
    tenants: [acme]
    values: {times: 2}
  - kind: redact
    pattern: "secret"
  - kind: python
    factory: tests.tools.test_tools_hooks:suffix_hook
    options: {suffix: "!"}
    tools: ["calculator"]
"""
    )
    chain = build_chain(
        load_hooks_config(path),
        audit_writes=None,
        approvals=None,
        buckets=MemoryBuckets(),
        approval_timeout_seconds=60,
        max_observation_chars=1000,
    )
    host = ToolHost(registry, hooks=chain)
    assert (await host.execute(call("boom"))).block_reason == "boom is retired"
    assert (await host.execute(call("repeat", text="ab", tenant="acme"))).observation == "abab"
    assert (await host.execute(call("repeat", text="ab", tenant="other"))).observation == "ab"
    assert (await host.execute(call("repeat", text="a secret"))).observation == "a [redacted]"
    assert (await host.execute(call("calculator", expression="2"))).observation == "2!"
    assert (await host.execute(call("hang", tenant="auditors"))).blocked


def suffix_hook(suffix: str) -> Hook:
    """A hook of one's own, as a hooks file's `python` entry names it."""

    @dataclass(kw_only=True)
    class Suffix(Hook):
        name: str = "suffix"
        fail_closed: bool = False

        async def post(self, ctx: HookContext, record: CallRecord) -> PostResult:
            return PostResult(observation=record.observation + suffix)

    return Suffix()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hooks: [{kind: nope}]", "hooks.0"),
        ("hooks: [{kind: rate_limit, capacity: 0}]", "capacity"),
        ("hooks: [{kind: deny, colour: red}]", "colour"),
        ("hooks: [: bad", "cannot read"),
    ],
)
def test_bad_hooks_file_is_refused_with_the_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "hooks.yaml"
    path.write_text(text)
    with pytest.raises(HooksConfigError, match=message) as caught:
        load_hooks_config(path)
    assert str(path) in str(caught.value)


async def test_blocks_are_counted_by_hook(registry: ToolRegistry) -> None:
    def blocks() -> float:
        return REGISTRY.get_sample_value("shuttle_hook_blocks_total", {"hook": "deny"}) or 0.0

    before = blocks()
    host = make_host(registry, DenyHook(reason="no"))
    await host.execute(call("repeat", text="x"))
    await host.execute(call("repeat", text="y"))
    assert blocks() == before + 2
