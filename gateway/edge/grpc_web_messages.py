"""grpc-web messages in the codec the client chose: binary protobuf, or protobuf JSON
(`application/grpc-web+json`), decoded into and encoded from shuttle.v1 messages."""

from __future__ import annotations

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from gateway.edge.grpc_web_framing import WebContentType
from gateway.edge.grpc_web_status import RpcRefusal


def decode_request(kind: Descriptor, raw: bytes, content_type: WebContentType) -> Message:
    message = message_factory.GetMessageClass(kind)()
    try:
        if content_type.codec == "json":
            json_format.Parse(raw, message)
        else:
            message.ParseFromString(raw)
    except Exception as exc:
        raise RpcRefusal(
            grpc.StatusCode.INVALID_ARGUMENT, f"request is not a valid {kind.full_name}: {exc}"
        ) from None
    return message


def encode_reply(message: Message, content_type: WebContentType) -> bytes:
    if content_type.codec == "proto":
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode()


def reencode_reply(raw: bytes, kind: Descriptor, content_type: WebContentType) -> bytes:
    """A backend's reply bytes in the client's codec (as they are for binary protobuf)."""
    if content_type.codec == "proto":
        return raw
    message = message_factory.GetMessageClass(kind)()
    message.ParseFromString(raw)
    return encode_reply(message, content_type)
