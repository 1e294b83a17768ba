"""JSON-action parsing (the ReAct engine's mode for models without function calling)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, example, given
from hypothesis import strategies as st

from services.executor.engine.json_actions import JsonAction, parse_action
from tests.fuzz.profiles import fuzz

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=15,
)
json_args = st.dictionaries(st.text(max_size=10), json_values, max_size=5)
tool_names = st.text(min_size=1, max_size=30)
# Prose may hold braces and even whole JSON objects, as long as none of them is an action.
prose = st.text(max_size=60) | st.sampled_from(
    ["", "Sure.\n", 'Format: {"type": "…"}\n', "{not json} ", "{} ", "Step {1}: "]
)
junk = st.text(max_size=40) | st.sampled_from(["", "}", "}}]]", "\n```\nAnything else?", "{"])


def embed(body: str, before: str, after: str, fenced: bool) -> str:
    if fenced:
        return f"{before}\n```json\n{body}\n```\n{after}"
    return f"{before}{body}{after}"


@fuzz
@given(st.text(max_size=400))
@example('{"a":' + "[" * 100_000)  # nesting deeper than the decoder's recursion limit
@example('{"type": "tool_call", "tool_name": "calc", "tool_args": {"x": NaN}}')
@example('{"type": "tool_call", "tool_name": "calc", "tool_args": [1, 2]}')
@example('{"type": "tool_call", "tool_name": "calc", "tool_args": {"x": "\\ud83d"}}')
def test_arbitrary_text_is_an_action_or_none_never_an_exception(text: str) -> None:
    action = parse_action(text)
    assert action is None or action.type in ("tool_call", "final_answer")
    if action is not None and action.type == "tool_call":
        assert action.tool_name
        assert isinstance(json.loads(action.arguments_json), dict)
        action.arguments_json.encode()  # it goes out in a protobuf string


@fuzz
@given(
    name=tool_names,
    args=json_args,
    reasoning=st.text(max_size=30),
    before=prose,
    after=junk,
    fenced=st.booleans(),
    indent=st.sampled_from([None, 2]),
    ascii_only=st.booleans(),
)
@example(
    name="calculator",
    args={"expression": "1+1"},
    reasoning="",
    before="Use {} as a template. ",
    after="",
    fenced=False,
    indent=None,
    ascii_only=True,
)  # an object before the action that is not an action itself
@example(
    name="calculator",
    args={"expression": "1+1 \ud83d"},
    reasoning="",
    before="",
    after="",
    fenced=False,
    indent=None,
    ascii_only=True,
)  # half a surrogate pair, escaped
def test_a_tool_call_in_any_wrapping_parses_back_to_itself(
    name: str,
    args: dict[str, Any],
    reasoning: str,
    before: str,
    after: str,
    fenced: bool,
    indent: int | None,
    ascii_only: bool,
) -> None:
    body = json.dumps(
        {"type": "tool_call", "reasoning": reasoning, "tool_name": name, "tool_args": args},
        indent=indent,
        ensure_ascii=ascii_only,
    )
    action = parse_action(embed(body, before, after, fenced))
    assert action is not None
    assert (action.type, action.tool_name, action.reasoning) == ("tool_call", name, reasoning)
    assert json.loads(action.arguments_json) == args
    action.arguments_json.encode()


@fuzz
@given(name=tool_names, before=prose, after=junk)
def test_missing_or_null_tool_args_mean_no_arguments(name: str, before: str, after: str) -> None:
    for form in ({}, {"tool_args": None}):
        body = json.dumps({"type": "tool_call", "tool_name": name, **form})
        action = parse_action(f"{before}{body}{after}")
        assert action == JsonAction("tool_call", "", name, "{}")


@fuzz
@given(
    answer=json_values,
    reasoning=st.text(max_size=30),
    before=prose,
    after=junk,
    fenced=st.booleans(),
)
def test_a_final_answer_parses_back_as_text(
    answer: Any, reasoning: str, before: str, after: str, fenced: bool
) -> None:
    body = json.dumps({"type": "final_answer", "reasoning": reasoning, "answer": answer})
    action = parse_action(embed(body, before, after, fenced))
    assert action is not None and action.type == "final_answer"
    assert action.reasoning == reasoning
    if isinstance(answer, str):
        assert action.answer == answer
    else:  # structured answers arrive as their JSON text
        assert json.loads(action.answer) == answer


@fuzz
@given(
    kind=st.sampled_from(["tool_call", "final_answer", "dance", None, 3]),
    fields=st.dictionaries(
        st.sampled_from(["tool_name", "tool_args", "answer", "reasoning"]), json_values
    ),
)
# An object nested in a value is not read as an action of its own.
@example(kind="tool_call", fields={"tool_name": {"answer": None}})
# With no type, a call without usable arguments may still be an answer.
@example(kind=None, fields={"tool_name": "x", "tool_args": 0, "answer": "a"})
def test_objects_missing_what_their_type_needs_are_not_actions(
    kind: Any, fields: dict[str, Any]
) -> None:
    tool_args = fields.get("tool_args")
    # Arguments written as a string are judged by the object they hold (test_messy_output).
    assume(not isinstance(tool_args, str))
    data = {"type": kind, **fields}
    action = parse_action(json.dumps(data))
    # A missing type is read from the fields: small models leave it out.
    well_formed = (
        kind in ("tool_call", None)
        and isinstance(fields.get("tool_name"), str)
        and fields["tool_name"] != ""
        and (tool_args is None or isinstance(tool_args, dict))
    ) or (kind in ("final_answer", None) and "answer" in fields)
    assert (action is not None) == well_formed
