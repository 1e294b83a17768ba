"""With authentication off, the gateway answers only requests addressed to a loopback name.

Auth off trusts whoever can reach 127.0.0.1, which a web page can too: its own DNS name,
rebound to 127.0.0.1, makes the browser send the page's requests here with the page's name
in `Host`. Such requests are refused with 421 Misdirected Request; `localhost`,
`*.localhost`, 127.0.0.0/8 and `[::1]` (with any port) pass. With `SHUTTLE_AUTH=required`
every request carries a key, so any Host is answered.
"""

from __future__ import annotations

import ipaddress
import re

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import error_response
from shuttle.settings import AuthMode

# A host and an optional port, as a Host header carries them; IPv6 addresses in brackets.
_HOST = re.compile(r"(?:\[(?P<ipv6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]]+))(?::[0-9]{1,5})?")


def is_loopback_host(host: str) -> bool:
    """Whether a Host header names this machine's loopback: a name under `localhost`, an
    address in 127.0.0.0/8, or `[::1]`, with or without a port."""
    match = _HOST.fullmatch(host.strip().lower())
    if match is None:
        return False
    name = match["name"]
    if name is None:
        return _loopback_address(match["ipv6"])
    name = name.removesuffix(".")
    return name == "localhost" or name.endswith(".localhost") or _loopback_address(name)


def _loopback_address(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


class LoopbackHostOnly:
    """Refuses, while `auth` is off, every request whose Host is not a loopback name."""

    def __init__(self, app: ASGIApp, auth: AuthMode) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.auth is not AuthMode.OFF or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host", "")
        if is_loopback_host(host):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await misdirected(host)(scope, receive, send)


def misdirected(host: str) -> Response:
    return error_response(
        421,
        "misdirected_request",
        f"this gateway runs with SHUTTLE_AUTH=off, so it answers only requests addressed to "
        f"a loopback name (localhost, 127.0.0.1, [::1]), not Host {host[:100]!r}: a web page "
        "whose DNS name points here must not drive it; SHUTTLE_AUTH=required lifts this",
    )
