"""Who is calling. With auth off (loopback only) every caller is the default tenant."""

from __future__ import annotations

from fastapi import Request

from shuttle.settings import Settings


def tenant_of(request: Request) -> str:
    settings: Settings = request.app.state.settings
    return settings.default_tenant
