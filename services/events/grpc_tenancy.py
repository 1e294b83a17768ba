"""Whose workflows a call to the events service is about: the x-shuttle-tenant metadata,
else the request's tenant_id field (for callers that cannot set metadata)."""

from __future__ import annotations

from typing import Any

import grpc

from shuttle.grpc_client import TENANT_METADATA_KEY

from .errors import InvalidArgument


async def caller_tenant(context: grpc.aio.ServicerContext[Any, Any], field_value: str) -> str:
    """The caller's tenant: the metadata's, else `field_value`; both set and different is
    refused with INVALID_ARGUMENT rather than guessed."""
    from_metadata = ""
    for key, value in context.invocation_metadata() or ():
        if key == TENANT_METADATA_KEY:
            from_metadata = value if isinstance(value, str) else value.decode()
    try:
        return agreed_tenant(from_metadata, field_value)
    except InvalidArgument as mismatch:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(mismatch))
        raise AssertionError("context.abort returned") from None


def agreed_tenant(from_metadata: str, field_value: str) -> str:
    """The metadata's tenant, else the field's; InvalidArgument when both are set and differ."""
    if from_metadata and field_value and from_metadata != field_value:
        raise InvalidArgument(
            f"tenant_id {field_value!r} differs from the {TENANT_METADATA_KEY} metadata "
            f"{from_metadata!r}: send one tenant"
        )
    return from_metadata or field_value
