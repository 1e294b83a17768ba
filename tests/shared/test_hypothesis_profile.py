"""Property tests see the same examples on every run unless asked to explore."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.profiles import fuzz
from tests.support.hypothesis_profiles import PROFILE_NAME


def examples_drawn(decorate: settings) -> list[object]:
    seen: list[object] = []

    @decorate
    @given(st.text(max_size=20), st.integers())
    def record(text: str, number: int) -> None:
        seen.append((text, number))

    record()
    return seen


@pytest.mark.skipif(PROFILE_NAME != "ci", reason="the thorough profile explores on purpose")
@pytest.mark.parametrize(
    "decorate", [settings(max_examples=30), fuzz], ids=["explicit-settings", "fuzz-profile"]
)
def test_a_property_draws_the_same_examples_on_every_run(decorate: settings) -> None:
    first, second = examples_drawn(decorate), examples_drawn(decorate)
    assert len(first) > 1
    assert first == second
