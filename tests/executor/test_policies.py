"""The engine's pure parts: JSON actions, guards, control state, inbox, budget, observations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.executor.commands.desk import (
    ControlAction,
    ControlState,
    InvalidTransition,
    check_transition,
    control_state,
)
from services.executor.engine.conversation import Conversation
from services.executor.engine.json_actions import extract_json_object, parse_action
from services.executor.engine.observations import model_observation
from services.executor.engine.synthesis import ToolStep, budget_answer
from services.executor.engine.tokens import estimate_entries, estimate_messages, estimate_tools
from services.executor.policies.budget import BudgetCheck, TokenBudget
from services.executor.policies.checklist import CompletionChecklist
from services.executor.policies.context_guard import ContextGuard, Situation
from services.executor.policies.control import RunCancelled, RunControl
from services.executor.policies.cycles import CycleDetector, call_key
from services.executor.policies.interrupts import InterruptInbox
from services.executor.policies.reflection import SelfReflection
from shuttle.llm.demo import DemoModel
from shuttle.tool_calls import Artifact, ToolOutcome
from shuttle.workflow_log import LogCommand
from tests.executor.conftest import agent_defaults

DEFAULTS = agent_defaults()


def test_json_actions_are_found_in_fences_and_prose() -> None:
    fenced = (
        'Sure:\n```json\n{"type": "tool_call", "tool_name": "calculator", '
        '"tool_args": {"expression": "1+1"}}\n```'
    )
    action = parse_action(fenced)
    assert action is not None and action.type == "tool_call"
    assert action.tool_name == "calculator" and action.arguments_json == '{"expression":"1+1"}'
    final = parse_action('I am done. {"type": "final_answer", "answer": {"total": 3}}')
    assert final is not None and final.answer == '{"total": 3}'
    assert extract_json_object('{not json} then {"a": 1}') == {"a": 1}


@pytest.mark.parametrize(
    "reply",
    [
        "no json at all",
        '{"type": "tool_call", "tool_args": {}}',  # no tool name
        '{"type": "final_answer"}',  # no answer
        '{"type": "dance"}',
        "[1, 2, 3]",
    ],
)
def test_replies_that_are_not_actions(reply: str) -> None:
    assert parse_action(reply) is None


def test_cycle_keys_ignore_key_order_and_spacing() -> None:
    assert call_key("calc", '{"a": 1, "b": 2}') == call_key("calc", '{"b":2,"a":1}')
    assert call_key("calc", '{"a": 1}') != call_key("calc", '{"a": 2}')
    assert call_key("calc", '{"a": 1}') != call_key("other", '{"a": 1}')


def test_cycle_warnings_start_at_the_threshold() -> None:
    detector = CycleDetector(DEFAULTS.cycle_threshold)
    warnings = [detector.observe("calc", '{"x": 1}') for _ in range(DEFAULTS.cycle_threshold + 1)]
    assert [w is not None for w in warnings] == [False] * (DEFAULTS.cycle_threshold - 1) + [
        True,
        True,
    ]
    assert detector.observe("calc", '{"x": 2}') is None


def test_reflection_counts_calls_across_batches() -> None:
    interval = DEFAULTS.reflection_interval
    reflection = SelfReflection(interval)
    assert reflection.after_tool_calls(interval - 1) is None
    assert reflection.after_tool_calls(2) is not None  # crosses the interval mid-batch
    assert reflection.after_tool_calls(interval - 2) is None
    assert SelfReflection(0).after_tool_calls(100) is None


def test_checklist_fires_once() -> None:
    checklist = CompletionChecklist(True, DEFAULTS.completion_check_min_tools)
    assert checklist.before_final_answer(DEFAULTS.completion_check_min_tools - 1) is None
    assert checklist.before_final_answer(DEFAULTS.completion_check_min_tools) is not None
    assert checklist.before_final_answer(DEFAULTS.completion_check_min_tools + 5) is None


def test_budget_warns_once_and_then_reports_exhaustion() -> None:
    budget = TokenBudget(1000, DEFAULTS.budget_warn_percent)
    below = int(1000 * DEFAULTS.budget_warn_percent / 100) - 1
    assert budget.charge(below).warn is False
    assert budget.charge(1).warn is True
    check = budget.charge(999 - budget.spent)
    assert check.warn is False and check.exhausted is False and budget.refusal() is None
    assert budget.charge(1).exhausted is True and budget.exhausted
    assert budget.charge(50).exhausted is False, "the exhaustion is reported once"
    assert budget.refusal() == "token budget exhausted (1050 of 1000 tokens used)"
    unlimited = TokenBudget(0, 80)
    assert unlimited.charge(10**9) == BudgetCheck() and not unlimited.exhausted


def test_the_inbox_takes_each_message_once_and_merges_in_log_order() -> None:
    inbox = InterruptInbox()
    inbox.deliver(9, "second")
    inbox.deliver(7, "first")
    inbox.deliver(9, "second")  # the same event by the other path
    merged = inbox.drain()
    assert merged is not None and "1. first\n2. second" in merged.text
    assert merged.seqs == (7, 9)
    assert inbox.drain() is None
    inbox.deliver(7, "first")
    assert inbox.drain() is None


async def test_run_control_orders_commands_by_seq_and_cancel_is_final() -> None:
    control = RunControl()
    control.apply(5, "WORKFLOW_RESUMED")
    control.apply(3, "WORKFLOW_PAUSING")  # older than the resume: not paused
    assert not control.pause_requested
    control.apply(8, "WORKFLOW_PAUSING")
    assert control.pause_requested
    waiting = asyncio.ensure_future(control.checkpoint("llm_call", _Reporter()))
    await asyncio.sleep(0)
    assert not waiting.done()
    control.apply(9, "WORKFLOW_CANCELLING", "stop")
    with pytest.raises(RunCancelled, match="stop"):
        await waiting


class _Reporter:
    last_seq = 10

    async def workflow_paused(self, checkpoint: str) -> None:
        pass

    async def workflow_resumed(self, reason: str) -> None:
        pass

    async def flush(self) -> None:
        pass


@pytest.mark.parametrize(
    ("action", "status", "state", "allowed"),
    [
        (ControlAction.PAUSE, "RUNNING", ControlState(False, False), True),
        (ControlAction.PAUSE, "PENDING", ControlState(False, False), True),
        (ControlAction.PAUSE, "RUNNING", ControlState(True, False), False),
        (ControlAction.RESUME, "PAUSED", ControlState(True, False), True),
        (ControlAction.RESUME, "RUNNING", ControlState(True, False), True),  # pause pending
        (ControlAction.RESUME, "RUNNING", ControlState(False, False), False),
        (ControlAction.CANCEL, "PAUSED", ControlState(True, False), True),
        (ControlAction.CANCEL, "RUNNING", ControlState(False, True), False),
        (ControlAction.CANCEL, "COMPLETED", ControlState(False, False), False),
        (ControlAction.PAUSE, "FAILED", ControlState(False, False), False),
    ],
)
def test_transitions(
    action: ControlAction, status: str, state: ControlState, allowed: bool
) -> None:
    if allowed:
        check_transition(action, status, state)
    else:
        with pytest.raises(InvalidTransition):
            check_transition(action, status, state)


def test_control_state_follows_the_log() -> None:
    def log(*types: str) -> list[LogCommand]:
        return [LogCommand(i, t) for i, t in enumerate(types, 1)]

    assert control_state(log("WORKFLOW_PAUSING")) == ControlState(True, False)
    assert control_state(log("WORKFLOW_PAUSING", "WORKFLOW_PAUSED", "WORKFLOW_RESUMED")) == (
        ControlState(False, False)
    )
    assert control_state(log("WORKFLOW_CANCELLING")).cancelling


async def test_truncation_never_separates_tool_results_from_their_call() -> None:
    conversation = Conversation()
    conversation.add({"role": "system", "content": "s"})
    conversation.add_user("the question " * 50, pinned=True)
    for i in range(4):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        conversation.add({"role": "assistant", "content": None, "tool_calls": [call]})
        conversation.add({"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 800})
    # The demo model's summary is long and unhelpful here, so truncation has to do the job.
    guard = ContextGuard(DemoModel(), budget_tokens=600, keep_recent=1)
    compaction = await guard.fit(conversation, [], Situation())
    assert compaction is not None and compaction.tokens_after <= 600
    roles = [m["role"] for m in conversation.messages]
    assert roles[:2] == ["system", "user"]
    for index, role in enumerate(roles):
        if role == "tool":
            assert roles[index - 1] in ("assistant", "tool")
    assert conversation.messages[1]["content"].startswith("the question")


async def test_the_guard_counts_what_the_model_is_sent() -> None:
    """Entries are counted once each and the schemas once per run; the guard's figures must
    still be the estimate of the messages and schemas as the model is sent them."""
    tools = [
        {
            "type": "function",
            "function": {"name": "lookup", "description": "Ünïcode " * 20, "parameters": {}},
        }
    ]
    conversation = Conversation()
    conversation.add_user("question " * 40, pinned=True)
    guard = ContextGuard(DemoModel(), budget_tokens=400, keep_recent=2)
    compactions = 0
    for i in range(6):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "lookup", "arguments": "{}"},
        }
        conversation.add({"role": "assistant", "content": None, "tool_calls": [call]})
        conversation.add({"role": "tool", "tool_call_id": f"c{i}", "content": "数据" * 30})
        compaction = await guard.fit(conversation, tools, Situation(tool_calls=i + 1))
        sent = estimate_messages(conversation.messages, tools)
        assert estimate_entries(conversation.entries, estimate_tools(tools)) == sent
        if compaction is None:
            assert sent <= 400
        else:
            compactions += 1
            assert compaction.tokens_after == sent
    assert compactions > 0


def test_artifacts_reach_the_model_only_as_summaries() -> None:
    outcome = ToolOutcome(
        observation="<html>" + "x" * 10_000,
        artifacts=(Artifact("report.html", "text/html", 10_006),),
    )
    shown = model_observation(outcome)
    assert shown.startswith("[Artifact generated: report.html] (text/html, 10006 bytes)")
    assert len(shown) < 600
    assert model_observation(ToolOutcome(observation="42")) == "42"


def test_the_budget_answer_lists_what_was_found() -> None:
    steps = [
        ToolStep(1, "calculator", '{"expression": "6*7"}', ToolOutcome("42")),
        ToolStep(2, "calculator", '{"expression": "1/0"}', ToolOutcome("no", error="zero")),
    ]
    text = budget_answer(steps, 500, "")
    assert "token budget of 500 tokens was used up" in text
    assert '- calculator({"expression": "6*7"}): 42' in text and "1/0" not in text


def well_paired(messages: list[dict[str, Any]]) -> bool:
    """Every `tool` message answers a call of the assistant message before its run of
    results, and every call has its result: what strict servers require."""
    asked: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            asked = [call["id"] for call in message.get("tool_calls") or ()]
        elif message["role"] == "tool":
            if message["tool_call_id"] not in asked:
                return False
            asked.remove(message["tool_call_id"])
        elif asked:
            return False  # a call left without its result
    return not asked


async def test_truncating_two_large_results_drops_their_call_with_them() -> None:
    conversation = Conversation()
    conversation.add({"role": "system", "content": "s"})
    query = "Compare the two reports. " * 40
    conversation.add_user(query, pinned=True)
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(2)
    ]
    conversation.add({"role": "assistant", "content": None, "tool_calls": calls})
    for i in range(2):
        conversation.add({"role": "tool", "tool_call_id": f"c{i}", "content": "r" * 20_000})
    guard = ContextGuard(DemoModel(), budget_tokens=400, keep_recent=2)
    await guard.fit(conversation, [], Situation(tool_calls=2))
    messages = conversation.messages
    assert well_paired(messages), [m["role"] for m in messages]
    # The pinned query is neither dropped nor clipped.
    assert messages[1] == {"role": "user", "content": query}
