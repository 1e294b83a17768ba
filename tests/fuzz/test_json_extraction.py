"""The planner's JSON extraction: nesting, escapes, unicode, fences, several objects, slips.

Extends tests/planner/test_json_extract.py (arbitrary text, one object in prose or a fence).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, example, given
from hypothesis import strategies as st

from services.planner.json_extract import JSONExtractionError, extract_json
from tests.fuzz.profiles import fuzz

# Quotes, backslashes, control characters and astral-plane characters all escape differently.
tricky_text = st.text(
    alphabet=st.sampled_from("\"\\/\n\t\x00\x1f{}[],:'é中😀\u2028 aTrueNone") | st.characters(),
    max_size=12,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(tricky_text, children, max_size=3)
    ),
    max_leaves=10,
)
json_objects = st.dictionaries(tricky_text, json_values, min_size=1, max_size=4)
# Prose without brackets, so the objects placed in it are the only candidates.
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]"), max_size=40)
# Text a repair may change (code outside strings): words only, no quotes or brackets.
plain_words = st.text(
    alphabet=st.sampled_from("abc xyz,.:!?-True False None 0123"), min_size=0, max_size=16
)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@fuzz
@given(obj=json_objects, before=prose, after=prose, ascii_only=st.booleans())
def test_escapes_and_unicode_survive_extraction(
    obj: dict[str, Any], before: str, after: str, ascii_only: bool
) -> None:
    text = f"{before}{json.dumps(obj, ensure_ascii=ascii_only)}{after}"
    assume(not _is_json(text))  # prose that makes the whole text one value changes the answer
    assert extract_json(text) == obj


@fuzz
@given(depth=st.integers(min_value=1, max_value=200), leaf=json_values, before=prose)
def test_deeply_nested_objects_are_found_whole(depth: int, leaf: Any, before: str) -> None:
    obj: Any = leaf
    for level in range(depth):
        obj = {f"k{level}": obj} if level % 2 else {"list": [obj]}
    assume(isinstance(obj, dict))
    assert extract_json(f"{before} {json.dumps(obj)} .") == obj


@fuzz
@given(first=json_objects, second=json_objects, before=prose, between=prose, after=prose)
def test_of_several_objects_the_longest_wins(
    first: dict[str, Any], second: dict[str, Any], before: str, between: str, after: str
) -> None:
    a, b = json.dumps(first), json.dumps(second)
    found = extract_json(f"{before}{a}{between or ' '}{b}{after}")
    # Ties go to the first one written.
    assert found == (first if len(a) >= len(b) else second)


@fuzz
@given(decoy=json_objects, wanted=json_objects, before=prose, after=prose)
def test_a_fenced_object_wins_over_objects_in_the_prose(
    decoy: dict[str, Any], wanted: dict[str, Any], before: str, after: str
) -> None:
    text = f"{before}{json.dumps(decoy)}\n```json\n{json.dumps(wanted, indent=2)}\n```\n{after}"
    assert extract_json(text) == wanted


@fuzz
@given(obj=json_objects, before=prose, after=prose)
@example(obj={"msg": "True story,]", "n": 1}, before="", after="")
def test_trailing_commas_are_repaired_without_touching_strings(
    obj: dict[str, Any], before: str, after: str
) -> None:
    body = json.dumps(obj)
    slipped = f"{body[:-1]},}}"  # the model's slip: a comma before the closing brace
    assert extract_json(f"{before}{slipped}{after}") == obj


python_values = st.recursive(
    st.none() | st.booleans() | st.integers() | plain_words,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(plain_words, children, max_size=3)
    ),
    max_leaves=8,
)


@fuzz
@given(
    obj=st.dictionaries(plain_words, python_values, min_size=1, max_size=4),
    before=prose,
    after=prose,
)
@example(obj={"msg": "None, True", "ok": True, "left": None}, before="Result: ", after="")
def test_python_literals_are_read_as_json_and_strings_kept_as_written(
    obj: dict[str, Any], before: str, after: str
) -> None:
    assert extract_json(f"{before}{obj!r}{after}") == obj


@fuzz
@given(st.binary(max_size=200).map(lambda b: b.decode("latin-1")) | st.text(max_size=200))
@example("{" * 5_000 + "}" * 5_000)
@example("[" * 100_000)
@example('{"a": ' * 300)
def test_hostile_text_gives_a_value_or_our_error(text: str) -> None:
    try:
        value = extract_json(text)
    except JSONExtractionError as exc:
        assert str(exc)
    else:
        assert isinstance(value, dict | list)
