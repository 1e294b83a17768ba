"""Settings every test directory shares."""

from __future__ import annotations

from tests.support import hypothesis_profiles

hypothesis_profiles.load()
