"""The takeover matrix's checks catch what they are for, on hand-made logs (no processes): an
effect applied twice, a call observed twice, a wrong answer, a run not resumed, an answer
restarted without its signal or not from index 0."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.chaos.effect_provider import EffectProvider, Execution
from tests.chaos.subscriber import Subscription
from tests.chaos.takeover import ChaosRun, Kit, run_problems
from tests.chaos.takeover_model import EFFECTS_FILE, PROVIDER_TOOL, TakeoverModel, answer_text
from tests.chaos.takeover_points import Synthesis

WF = "wf-1"
ANSWER = "Answer: 42."


def event(seq: int, type_: str, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "agent_id": "agent-main", "payload": payload}


def invoked(seq: int, call_id: str, tool: str, **args: Any) -> dict[str, Any]:
    return event(seq, "TOOL_INVOKED", call_id=call_id, tool_name=tool, tool_args=args)


def a_log(*middle: dict[str, Any], resumed: bool = True) -> list[dict[str, Any]]:
    events = [
        event(1, "WORKFLOW_STARTED"),
        invoked(2, "a.1.0", "file_ops", operation="append", path=EFFECTS_FILE, content="x\n"),
        event(3, "TOOL_OBSERVATION", call_id="a.1.0"),
        invoked(4, "a.2.0", PROVIDER_TOOL, note="n"),
    ]
    if resumed:
        events.append(
            event(5, "ERROR_RECOVERY", error_type="EXECUTOR_LOST", recovery_action="resumed")
        )
    events += [
        event(len(events) + 1, "TOOL_OBSERVATION", call_id="a.2.0"),
        *({**e, "seq": len(events) + 2 + i} for i, e in enumerate(middle)),
    ]
    events.append(event(len(events) + 1, "WORKFLOW_COMPLETED", result=ANSWER))
    events.append(event(len(events) + 1, "STREAM_END"))
    return events


class Fixture:
    def __init__(self, tmp_path: Path, lines: str = "x\n", executions: int = 1) -> None:
        self.provider = EffectProvider()
        self.kit = Kit(TakeoverModel(), self.provider)
        # run_problems reads only where the stack keeps its workspaces.
        self.stack: Any = SimpleNamespace(workspace_root=tmp_path)
        workspace = tmp_path / "default" / WF
        workspace.mkdir(parents=True)
        (workspace / EFFECTS_FILE).write_text(lines)
        for _ in range(executions):
            self.provider.executions.append(Execution(WF, "a.2.0", "", PROVIDER_TOOL, "n"))

    def problems(self, log: list[dict[str, Any]], resumed: bool = True) -> list[str]:
        run = ChaosRun("q", WF, [Subscription(WF, events=list(log), ended=True)])
        return run_problems(self.kit, self.stack, run, log, ANSWER, resumed)


def test_a_run_resumed_with_each_effect_once_is_clean(tmp_path: Path) -> None:
    assert Fixture(tmp_path).problems(a_log()) == []


def test_an_effect_applied_twice_is_caught(tmp_path: Path) -> None:
    twice_on_disk = Fixture(tmp_path / "disk", lines="x\nx\n").problems(a_log())
    assert any(EFFECTS_FILE in problem for problem in twice_on_disk)
    twice_by_provider = Fixture(tmp_path / "provider", executions=2).problems(a_log())
    assert any("provider effects" in problem for problem in twice_by_provider)


def test_idempotency_keys_are_checked_when_sent(tmp_path: Path) -> None:
    fixture = Fixture(tmp_path, executions=0)
    fixture.provider.executions.append(Execution(WF, "a.2.0", "other/key", PROVIDER_TOOL, "n"))
    assert any("idempotency keys" in p for p in fixture.problems(a_log()))


def test_a_second_observation_a_wrong_answer_or_no_resumption_is_caught(tmp_path: Path) -> None:
    fixture = Fixture(tmp_path)
    observed_twice = fixture.problems(a_log(event(0, "TOOL_OBSERVATION", call_id="a.2.0")))
    assert any("observations per call id" in p for p in observed_twice)

    wrong = a_log()
    wrong[-2] = {**wrong[-2], "payload": {"result": "Answer: 43."}}
    assert any("differs from the uninterrupted" in p for p in fixture.problems(wrong))

    assert any("no ERROR_RECOVERY" in p for p in fixture.problems(a_log(resumed=False)))
    assert any("although its executor lived" in p for p in fixture.problems(a_log(), False))


def test_a_subscriber_missing_a_seq_is_caught(tmp_path: Path) -> None:
    log = a_log()
    run = ChaosRun("q", WF, [Subscription(WF, events=log[:3] + log[4:], ended=True)])
    fixture = Fixture(tmp_path)
    found = run_problems(fixture.kit, fixture.stack, run, log, ANSWER, True)
    assert any("a subscriber got seqs" in p for p in found)


def restarted_answer(first_index: int = 0, signal: bool = True) -> list[dict[str, Any]]:
    deltas = [event(0, "THREAD_MESSAGE_DELTA", delta=d, index=i) for i, d in enumerate("abcd")]
    again = [
        event(0, "THREAD_MESSAGE_DELTA", delta=d, index=first_index + i)
        for i, d in enumerate(["Answer: ", "42."])
    ]
    events = [
        *deltas,
        event(0, "ERROR_RECOVERY", recovery_action="resumed"),
        *([event(0, "STATUS_UPDATE", kind="answer_restarted")] if signal else []),
        *again,
        event(0, "THREAD_MESSAGE_COMPLETED", content=ANSWER),
    ]
    return [{**e, "seq": i + 1} for i, e in enumerate(events)]


def test_an_answer_restarted_is_checked_for_its_signal_and_its_indexes() -> None:
    point = Synthesis()
    log = [event(1, "WORKFLOW_COMPLETED", result=ANSWER)]

    def problems(events: list[dict[str, Any]]) -> list[str]:
        run = ChaosRun("q", WF, [Subscription(WF, events=events, ended=True)])
        return point.problems(run, log, resumed=True)

    assert problems(restarted_answer()) == []
    assert problems(restarted_answer(signal=False)) != []
    assert any("indexes" in p for p in problems(restarted_answer(first_index=4)))


def test_the_model_echoes_what_the_tools_returned() -> None:
    prompt = (
        "Question: q\n\nSteps taken:\n1. file_ops({}) → appended 2 bytes to effects.txt\n"
        '2. record_effect({"note": "q"}) → effect 1 recorded\n\nDraft answer from the '
        "agent:\nDone.\n\nWrite the final answer."
    )
    body = {"messages": [{"role": "user", "content": prompt}], "stream": True}
    answer = answer_text(body)
    assert answer.startswith(
        "Answer: file_ops → appended 2 bytes to effects.txt; record_effect → effect 1 recorded."
    )
    twice = answer_text(
        {"messages": [{"role": "user", "content": prompt.replace("effect 1", "effect 2")}]}
    )
    assert twice != answer
