"""Hypothesis profiles for every property test: fixed examples by default, exploring on request.

The default `ci` profile is derandomized: each property sees the same examples on every run
and every machine, so a submission never fails on an example nobody has seen, and no example
database is written. `SHUTTLE_FUZZ_PROFILE=thorough` explores with fresh random examples
(many more for the `tests/fuzz/` properties); a failure it finds is fixed and pinned with
`@example`, which every profile then runs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SUPPRESSED = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("thorough", derandomize=False, deadline=None)

PROFILE_NAME = os.environ.get("SHUTTLE_FUZZ_PROFILE", "ci")
if PROFILE_NAME not in ("ci", "thorough"):
    raise RuntimeError(f"SHUTTLE_FUZZ_PROFILE must be 'ci' or 'thorough', not {PROFILE_NAME!r}")


def load() -> None:
    """Make the chosen profile every property's default (before test modules are imported)."""
    settings.load_profile(PROFILE_NAME)
