"""Every error leaves as JSON `{"error": {"code", "message"}}` with a fitting status."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

_GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_argument"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "already_exists"),
    grpc.StatusCode.FAILED_PRECONDITION: (409, "failed_precondition"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_denied"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "unauthenticated"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "resource_exhausted"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "not_implemented"),
    grpc.StatusCode.UNAVAILABLE: (503, "unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "deadline_exceeded"),
}

_HTTP_CODES = {404: "not_found", 413: "request_too_large"}


class ApiError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}},
        status_code=status,
        headers=dict(headers) if headers else None,
    )


def http_error_response(
    status: int, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The error body of a plain HTTP status, its code named where the API names one."""
    return error_response(status, _HTTP_CODES.get(status, f"http_{status}"), message, headers)


def from_rpc_error(exc: grpc.aio.AioRpcError) -> ApiError:
    return from_grpc_status(exc.code(), exc.details() or exc.code().name)


def from_grpc_status(grpc_status: grpc.StatusCode, message: str) -> ApiError:
    status, code = _GRPC_TO_HTTP.get(grpc_status, (502, "upstream_error"))
    return ApiError(status, code, message)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(grpc.aio.AioRpcError)
    async def _rpc_error(_: Request, exc: grpc.aio.AioRpcError) -> JSONResponse:
        err = from_rpc_error(exc)
        return error_response(err.status, err.code, err.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}"
            for e in exc.errors()
        )
        return error_response(400, "invalid_request", problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return http_error_response(exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal", "internal error; see the gateway log")
