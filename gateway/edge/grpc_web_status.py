"""How the grpc-web face states an outcome that is not a backend's reply: refusals before any
call, trailers-only responses, and the gateway's own HTTP errors as the gRPC status each
HTTP status stands for."""

from __future__ import annotations

import grpc
from starlette.responses import Response

from gateway.edge.grpc_web_framing import WebContentType, percent_encode
from gateway.errors import ApiError

_HTTP_TO_GRPC = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    # 409 here is an Idempotency-Key whose first request is still starting its run: the
    # client retries the whole call, which is what ABORTED tells it.
    409: grpc.StatusCode.ABORTED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    # 422 is an Idempotency-Key reused with another request: the key's state forbids it.
    422: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


class RpcRefusal(Exception):
    """A call answered by the gateway with a status, before or instead of any backend."""

    def __init__(
        self, code: grpc.StatusCode, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.headers = headers or {}

    @classmethod
    def from_api_error(cls, exc: ApiError) -> RpcRefusal:
        code = _HTTP_TO_GRPC.get(exc.status, grpc.StatusCode.UNKNOWN)
        return cls(code, exc.message, exc.headers)


def trailers_only(
    content_type: WebContentType,
    code: grpc.StatusCode,
    message: str,
    extra: dict[str, str] | None = None,
) -> Response:
    headers = {
        "grpc-status": str(code.value[0]),
        "grpc-message": percent_encode(message),
        **(extra or {}),
    }
    return Response(b"", status_code=200, media_type=content_type.response, headers=headers)
