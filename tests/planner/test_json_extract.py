"""JSON extraction from free model text, by example and by property."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from services.planner.json_extract import JSONExtractionError, extract_json


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  [1, 2, {"b": null}]  ', [1, 2, {"b": None}]),
        ('Sure!\n```json\n{"a": [1, 2]}\n```\nAnything else?', {"a": [1, 2]}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('The plan is {"steps": [{"id": "s1"}]} as requested.', {"steps": [{"id": "s1"}]}),
        ('{"a": [1, 2,], "b": {"c": 3,},}', {"a": [1, 2], "b": {"c": 3}}),
        (
            "Result: {'name': 'Kyoto', 'ok': True, 'left': None}",
            {"name": "Kyoto", "ok": True, "left": None},
        ),
        (
            'noise {} then {"wanted": {"nested": 1}} and [1, 2, 3, 4, 5, 6, 7]',
            {"wanted": {"nested": 1}},
        ),
        ('{"text": "braces } inside { strings"}', {"text": "braces } inside { strings"}),
    ],
)
def test_json_is_found_in_model_replies(reply: str, expected: Any) -> None:
    assert extract_json(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   ",
        "no json here at all",
        "{unclosed: true",
        "42",
        '"just a string"',
        # An apostrophe inside a single-quoted value leaves the quoting ambiguous.
        "{'a': 'it's', 'b': 'x'}",
    ],
)
def test_text_without_a_usable_value_raises_our_error(reply: str) -> None:
    with pytest.raises(JSONExtractionError):
        extract_json(reply)


def _loads_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=5)
# Prose around the object: anything but braces, so the object is the only one in the text.
prose = st.text(alphabet=st.characters(blacklist_characters="{}"), max_size=80)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises_anything_but_our_error(text: str) -> None:
    try:
        value = extract_json(text)
    except JSONExtractionError:
        return
    assert isinstance(value, dict | list)


@settings(max_examples=300, deadline=None)
@given(before=prose, obj=json_objects, after=prose, indent=st.sampled_from([None, 2]))
def test_an_object_embedded_in_prose_is_recovered(
    before: str, obj: dict[str, Any], after: str, indent: int | None
) -> None:
    text = f"{before}{json.dumps(obj, indent=indent)}{after}"
    # Prose that turns the whole text into one JSON array makes that array the answer.
    assume(not isinstance(_loads_or_none(text), list))
    assert extract_json(text) == obj


def test_an_object_wrapped_in_stray_brackets_is_still_found() -> None:
    assert extract_json('See [1]: [{"a": 1}] ok') == {"a": 1}


@settings(max_examples=100, deadline=None)
@given(before=prose, obj=json_objects, after=prose)
def test_an_object_in_a_fenced_block_is_recovered(
    before: str, obj: dict[str, Any], after: str
) -> None:
    text = f"{before}\n```json\n{json.dumps(obj, ensure_ascii=False)}\n```\n{after}"
    assert extract_json(text) == obj
