"""Alembic's environment for every component's migrations (see shuttle.migrations)."""

from shuttle.migrations import run_environment

run_environment()
