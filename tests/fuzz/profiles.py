"""Hypothesis settings for the fuzz properties: modest by default, more on request.

`SHUTTLE_FUZZ_PROFILE=thorough` runs every property with many more examples (minutes, not
seconds); the default `ci` keeps the whole directory near a minute on a small machine.
Applied per test (`@fuzz`), not loaded globally, so other directories keep their settings.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large]

PROFILES = {
    "ci": settings(max_examples=60, deadline=None, suppress_health_check=_SUPPRESSED),
    "thorough": settings(max_examples=2_000, deadline=None, suppress_health_check=_SUPPRESSED),
}

PROFILE_NAME = os.environ.get("SHUTTLE_FUZZ_PROFILE", "ci")
if PROFILE_NAME not in PROFILES:
    raise RuntimeError(
        f"SHUTTLE_FUZZ_PROFILE must be one of {sorted(PROFILES)}, not {PROFILE_NAME!r}"
    )

fuzz = PROFILES[PROFILE_NAME]
"""Decorator: the chosen profile's settings."""


def fewer(divisor: int) -> settings:
    """The chosen profile with fewer examples, for properties that drive a real server."""
    return settings(fuzz, max_examples=max(10, fuzz.max_examples // divisor))
