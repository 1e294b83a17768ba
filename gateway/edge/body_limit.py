"""The largest request body the gateway reads (`SHUTTLE_GATEWAY_MAX_BODY_BYTES`).

Hand-written because Starlette's limiter (FastAPI's `max_body_size`) answers a body whose
Content-Length already passes the limit with its own plain-text 413, replacing whatever the
app answers: a client would get neither the gateway's JSON error nor the limit it passed.
grpc-web calls are held to the same limit by their reader (`gateway/edge/grpc_web.py`), which
also refuses a frame whose header announces more, and answers in grpc-web's terms
(RESOURCE_EXHAUSTED) with the same message. They are told apart by path, not by content
type, which any client may claim.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.edge.grpc_web_methods import PACKAGE
from gateway.errors import http_error_response

GRPC_WEB_PATHS = f"/{PACKAGE}."
"""Where the grpc-web route (`/shuttle.v1.{service}/{method}`) answers."""


def too_large(limit: int, size: int | None = None) -> str:
    """The refusal of a body over `limit`, of `size` bytes when its Content-Length says."""
    body = "the request body" if size is None else f"the request body of {size:,} bytes"
    return (
        f"{body} passes the gateway's limit of {limit:,} bytes "
        "(SHUTTLE_GATEWAY_MAX_BODY_BYTES); send less, or raise the limit"
    )


def frame_too_large(length: int, limit: int) -> str:
    return (
        f"a grpc-web frame announces {length:,} bytes, past the gateway's limit of "
        f"{limit:,} bytes (SHUTTLE_GATEWAY_MAX_BODY_BYTES); send less, or raise the limit"
    )


class BodyLimit:
    """Refuses a body over `limit` bytes: at once when its Content-Length says so, else as
    soon as what has arrived passes it, so no more than `limit` bytes are ever held."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(GRPC_WEB_PATHS):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            response = http_error_response(413, too_large(self.limit, int(declared)))
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    # FastAPI passes an HTTPException raised while it reads a body on to the
                    # error handlers (any other exception becomes "error parsing the body").
                    raise HTTPException(413, too_large(self.limit))
            return message

        await self.app(scope, counted, send)
