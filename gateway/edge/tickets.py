"""Short-lived stream tickets: EventSource cannot send headers, and an API key in a URL
would end up in logs and browser history. A ticket names one tenant, one workflow and the
API key it was issued for, and expires within minutes; revoking the key ends it too.

Hand-written on the standard library's `hmac` (a dozen lines) so the clock can be passed in
and the claims stay explicit; the format is `base64url(claims JSON).base64url(HMAC-SHA256)`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass


class TicketError(ValueError):
    """The ticket is malformed, forged or expired; the message says which."""


@dataclass(frozen=True)
class Ticket:
    tenant_id: str
    workflow_id: str
    key_id: str
    expires_at: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TicketSigner:
    def __init__(
        self, secret: bytes, ttl_seconds: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._secret = secret
        self.ttl_seconds = ttl_seconds
        self._clock = clock

    @classmethod
    def from_setting(cls, secret: str, ttl_seconds: int) -> tuple[TicketSigner, bool]:
        """A signer and whether its secret was generated for this process only."""
        if secret:
            return cls(secret.encode(), ttl_seconds), False
        return cls(secrets.token_bytes(32), ttl_seconds), True

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode(errors="replace"), hashlib.sha256).digest())

    def issue(self, tenant_id: str, workflow_id: str, key_id: str) -> tuple[str, Ticket]:
        ticket = Ticket(tenant_id, workflow_id, key_id, int(self._clock()) + self.ttl_seconds)
        claims = {"t": tenant_id, "w": workflow_id, "k": key_id, "e": ticket.expires_at}
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        return f"{body}.{self._mac(body)}", ticket

    def verify(self, token: str) -> Ticket:
        """The ticket's claims; TicketError for anything but a ticket this key signed that
        has not expired (whether its API key is still valid is the caller's to check)."""
        body, dot, mac = token.partition(".")
        # Bytes, so that a ticket holding any character at all is compared, not an error:
        # compare_digest takes only ASCII str.
        if not dot or not hmac.compare_digest(
            mac.encode(errors="replace"), self._mac(body).encode()
        ):
            raise TicketError("stream ticket is not valid")
        try:
            claims = json.loads(_unb64(body))
            ticket = Ticket(str(claims["t"]), str(claims["w"]), str(claims["k"]), int(claims["e"]))
        except (ValueError, KeyError, TypeError):
            raise TicketError("stream ticket is not valid") from None
        if self._clock() >= ticket.expires_at:
            raise TicketError("stream ticket has expired; ask for a new one")
        return ticket
