"""Example counts for the fuzz properties: modest by default, many more when exploring.

`tests/support/hypothesis_profiles.py` picks the profile (derandomized `ci`, or `thorough`
with `SHUTTLE_FUZZ_PROFILE=thorough`); here each profile's example count, applied per test
(`@fuzz`) so other directories keep theirs. The default keeps the whole directory near a
minute on a small machine.
"""

from __future__ import annotations

from hypothesis import settings

from tests.support.hypothesis_profiles import PROFILE_NAME, SUPPRESSED

EXAMPLES = {"ci": 60, "thorough": 2_000}

fuzz = settings(max_examples=EXAMPLES[PROFILE_NAME], suppress_health_check=SUPPRESSED)
"""Decorator: the chosen profile's settings."""


def fewer(divisor: int) -> settings:
    """The chosen profile with fewer examples, for properties that drive a real server."""
    return settings(fuzz, max_examples=max(10, fuzz.max_examples // divisor))
