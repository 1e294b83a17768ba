"""The published OpenAPI document describes the errors the gateway really sends.

FastAPI documents a 422 response with its own validation shape on every operation that
takes input, while the gateway answers invalid input with 400 and the JSON error body of
gateway/errors.py. This rewrites the generated document once, as FastAPI's docs suggest
for extending it, so that generated clients expect the right status and body.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "examples": ["invalid_request"]},
                "message": {"type": "string"},
            },
        }
    },
}
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            generated = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = with_gateway_errors(generated)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def with_gateway_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with FastAPI's validation 422 replaced by 400, and every error response
    given the gateway's error body."""
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    schemas["Error"] = ERROR_SCHEMA
    error_body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses: dict[str, Any] = operation.get("responses", {})
            validation = responses.get("422")
            if validation is not None and _is_fastapi_validation(validation):
                del responses["422"]
                responses.setdefault("400", {"description": "invalid request"})
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    response["content"] = error_body
    return schema


def _is_fastapi_validation(response: dict[str, Any]) -> bool:
    text = json.dumps(response)
    return any(f"/{name}" in text for name in _FASTAPI_VALIDATION_SCHEMAS)
