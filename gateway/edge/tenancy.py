"""Who is calling: an API key (header), a stream ticket (query), or with auth off the
default tenant. Every identified caller is then counted against the rate limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from gateway.edge.rate_limit import RateLimiter
from gateway.edge.tickets import TicketError, TicketSigner
from gateway.errors import ApiError
from gateway.stores.keys import KeyStore
from shuttle.settings import AuthMode, Settings

ANONYMOUS_KEY = "anonymous"


@dataclass(frozen=True)
class Caller:
    tenant_id: str
    key_id: str
    # Set when the caller came with a stream ticket: it may read this workflow only.
    ticket_workflow: str | None = None


def presented_key(request: Request) -> str | None:
    authorization = request.headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("x-api-key") or None


async def identify(request: Request, *, ticket_allowed: bool = False) -> Caller:
    settings: Settings = request.app.state.settings
    if settings.auth is AuthMode.OFF:
        return Caller(settings.default_tenant, ANONYMOUS_KEY)
    secret = presented_key(request)
    if secret is not None:
        keys: KeyStore = request.app.state.keys
        key = await keys.verify(secret)
        if key is None:
            raise _unauthenticated("the API key is not valid (unknown or revoked)")
        return Caller(key.tenant_id, key.key_id)
    token = request.query_params.get("ticket")
    if token is not None and ticket_allowed:
        signer: TicketSigner = request.app.state.tickets
        try:
            ticket = signer.verify(token)
        except TicketError as exc:
            raise _unauthenticated(str(exc)) from None
        keys = request.app.state.keys
        if not await keys.active(ticket.key_id):
            raise _unauthenticated("the API key this stream ticket was issued for is revoked")
        return Caller(ticket.tenant_id, ticket.key_id, ticket_workflow=ticket.workflow_id)
    hint = " or a stream ticket (?ticket=)" if ticket_allowed else ""
    raise _unauthenticated(
        f"authentication required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'{hint}"
    )


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, headers={"WWW-Authenticate": "Bearer"})


async def _limited(request: Request, caller: Caller) -> Caller:
    limiter: RateLimiter = request.app.state.rate_limiter
    identity = caller.key_id
    if caller.key_id == ANONYMOUS_KEY and request.client is not None:
        identity = f"client:{request.client.host}"
    wait = await limiter.check(identity)
    if wait is not None:
        raise ApiError(
            429,
            "rate_limited",
            f"too many requests for this key (limit {limiter.rate}); retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    return caller


async def caller_of(request: Request) -> Caller:
    return await _limited(request, await identify(request))


async def stream_caller_of(request: Request) -> Caller:
    """As `caller_of`, but a stream ticket in the query is accepted too."""
    return await _limited(request, await identify(request, ticket_allowed=True))


def tenant_for_workflow(caller: Caller, workflow_id: str) -> str:
    """The tenant to ask the backends with; a ticket for another workflow sees nothing."""
    if caller.ticket_workflow is not None and caller.ticket_workflow != workflow_id:
        raise ApiError(404, "not_found", f"workflow {workflow_id} not found")
    return caller.tenant_id


CallerDep = Annotated[Caller, Depends(caller_of)]
StreamCallerDep = Annotated[Caller, Depends(stream_caller_of)]
