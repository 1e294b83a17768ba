"""API keys made the way an operator makes them: `shuttle apikey create`."""

from __future__ import annotations

import os
import subprocess
import sys


def create_api_key(tenant: str, variables: dict[str, str]) -> str:
    """A new key of `tenant` on the database `variables` point at (SHUTTLE_DATA_DIR,
    SHUTTLE_DATABASE_URL)."""
    done = subprocess.run(
        [sys.executable, "-m", "cli", "apikey", "create", "--tenant", tenant],
        env={**os.environ, **variables},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "shown once" in done.stderr
    return done.stdout.strip()
