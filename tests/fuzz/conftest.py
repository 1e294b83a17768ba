"""The gateway tests' stack (authentication required) and a finished workflow on it."""

from __future__ import annotations

from tests.gateway.conftest import auth_stack, finished_a

__all__ = ["auth_stack", "finished_a"]
