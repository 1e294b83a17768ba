"""Who may call Shuttle's gRPC services: the credential each call carries (grpc_client's
channels add it), the role it proves, and the check every server makes of it.

A component presents ``<role>.<hex HMAC-SHA256(token, role)>``, so its role is bound to the
credential and no header can claim another; the raw token is the operator's credential,
allowed everything. With mutual TLS the role comes from the peer certificate's subject CN
(``shuttle-<role>``) instead: a process holding the token could present any role's
credential, but not another component's certificate. Health is open to every caller (probes).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor

from shuttle.grpc_handlers import Behaviour, MethodHandler, with_behaviour
from shuttle.settings import Settings, SettingsError, is_loopback

GATEWAY = "gateway"
EXECUTOR = "executor"
TOOLS = "tools"
PLANNER = "planner"
EVENTS = "events"
OPERATOR = "operator"
COMPONENT_ROLES = (GATEWAY, EXECUTOR, TOOLS, PLANNER, EVENTS)
ANY_COMPONENT = frozenset(COMPONENT_ROLES)

AUTHORIZATION = "authorization"
_SCHEME = "Bearer "
_OPEN_PREFIX = "/grpc.health.v1.Health/"
_CERTIFICATE_PREFIX = "shuttle-"
_CERTIFICATE_ROLES = {f"{_CERTIFICATE_PREFIX}{role}": role for role in (*COMPONENT_ROLES, OPERATOR)}
_SETTINGS = "SHUTTLE_INTERNAL_TOKEN, or SHUTTLE_GRPC_TLS_CERT/_KEY/_CA"

# The role of the call being served, for a servicer's own finer checks (which events an
# Append may carry). With no credential configured nothing is checked: every caller stands
# where the operator does.
caller_role: ContextVar[str] = ContextVar("shuttle_caller_role", default=OPERATOR)

MethodRoles = Mapping[str, frozenset[str]]
"""The roles allowed each method, by its full path ("/package.Service/Method")."""


def credential(token: str, role: str) -> str:
    """What the component `role` presents, derived from the deployment's token."""
    digest = hmac.new(token.encode(), role.encode(), hashlib.sha256).hexdigest()
    return f"{role}.{digest}"


def method_roles(service: ServiceDescriptor, table: Mapping[str, Collection[str]]) -> MethodRoles:
    """`table` (method name -> roles) by full path; every method of `service` must be named,
    so a method added to the proto is closed until someone decides who may call it."""
    methods = {method.name for method in service.methods}
    if set(table) != methods:
        raise ValueError(
            f"{service.full_name}: roles missing for {sorted(methods - set(table))}, "
            f"given for unknown methods {sorted(set(table) - methods)}"
        )
    return {f"/{service.full_name}/{name}": frozenset(roles) for name, roles in table.items()}


@dataclass(frozen=True)
class TlsFiles:
    """This process's certificate and key, and the CA every component's certificate is from."""

    cert: bytes
    key: bytes
    ca: bytes

    @classmethod
    def from_settings(cls, settings: Settings) -> TlsFiles | None:
        paths = {
            "SHUTTLE_GRPC_TLS_CERT": settings.grpc_tls_cert,
            "SHUTTLE_GRPC_TLS_KEY": settings.grpc_tls_key,
            "SHUTTLE_GRPC_TLS_CA": settings.grpc_tls_ca,
        }
        missing = [name for name, path in paths.items() if path is None]
        if len(missing) == len(paths):
            return None
        if missing:
            raise SettingsError(f"mutual TLS needs all three files: set {', '.join(missing)} too")
        cert, key, ca = (_read(name, path) for name, path in paths.items())
        return cls(cert, key, ca)


def _read(variable: str, path: Path | None) -> bytes:
    assert path is not None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{variable}: cannot read {path}: {exc.strerror}") from None


@dataclass(frozen=True)
class ChannelAuth:
    """What one process presents on its channels to Shuttle's services; built once from
    Settings and handed to every `open_channel`, whose interceptors add it to each call."""

    authorization: str = ""
    """The whole `authorization` value ("Bearer …"); empty: none is sent."""
    tls: TlsFiles | None = None

    @classmethod
    def for_component(cls, settings: Settings, role: str) -> ChannelAuth:
        token = settings.internal_token
        header = f"{_SCHEME}{credential(token, role)}" if token else ""
        return cls(header, TlsFiles.from_settings(settings))

    @classmethod
    def operator(cls, token: str, tls: TlsFiles | None = None) -> ChannelAuth:
        """The operator's: the raw token (as grpcurl presents it)."""
        return cls(f"{_SCHEME}{token}" if token else "", tls)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if self.tls is None:
            return None
        return grpc.ssl_channel_credentials(self.tls.ca, self.tls.key, self.tls.cert)


NO_CREDENTIAL = ChannelAuth()


@dataclass(frozen=True)
class ServerAuth:
    """What a service requires of its callers; nothing when neither is configured."""

    token: str = ""
    tls: TlsFiles | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerAuth:
        return cls(settings.internal_token, TlsFiles.from_settings(settings))

    @property
    def enabled(self) -> bool:
        return bool(self.token) or self.tls is not None

    def check_bind(self, host: str, port: int) -> None:
        """Refuse to serve beyond loopback to callers that present nothing."""
        if not self.enabled and not is_loopback(host):
            raise SettingsError(
                f"will not listen on {host}:{port} for callers that present no credential: "
                f"set {_SETTINGS}"
            )

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if self.tls is None:
            return None
        return grpc.ssl_server_credentials(
            [(self.tls.key, self.tls.cert)], root_certificates=self.tls.ca, require_client_auth=True
        )

    def interceptor(self, roles: MethodRoles) -> grpc.aio.ServerInterceptor | None:
        """The check of every call; None (no cost at all) while nothing is required."""
        return _CallerCheck(self, roles) if self.enabled else None


NO_SERVER_AUTH = ServerAuth()


class _CallerCheck(grpc.aio.ServerInterceptor):
    """The credential of every call but Health's, then the method's roles; the caller's role
    is left in `caller_role`. Placed innermost, so the handler it is given is the registered
    one, the same object on every call of a method."""

    def __init__(self, auth: ServerAuth, roles: MethodRoles) -> None:
        self._roles = roles
        token = auth.token
        # Each expected value once, at start-up: a call costs a dict lookup and a compare.
        self._components = {
            f"{_SCHEME}{role}": (f"{_SCHEME}{credential(token, role)}", role)
            for role in COMPONENT_ROLES
        }
        self._operator = f"{_SCHEME}{token}" if token else ""
        self._tls = auth.tls is not None
        self._certified: dict[str, tuple[MethodHandler, MethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler | None]],
        details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        method: str = details.method
        if method.startswith(_OPEN_PREFIX):
            return await continuation(details)
        role = OPERATOR
        if self._operator:
            presented = _authorization(details.invocation_metadata)
            found = self._role_of(presented) if presented else None
            if found is None:
                return _refusal(
                    await continuation(details),
                    grpc.StatusCode.UNAUTHENTICATED,
                    _unauthenticated(method, presented),
                )
            role = found
        handler = await continuation(details)
        if handler is None:
            return None
        if self._tls:
            return self._by_certificate(method, handler)
        if role != OPERATOR and role not in self._roles.get(method, ANY_COMPONENT):
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED, _denied(method, role))
        caller_role.set(role)
        return handler

    def _role_of(self, presented: str) -> str | None:
        dot = presented.find(".", len(_SCHEME))
        expected = self._components.get(presented[:dot]) if dot > 0 else None
        try:
            if expected is not None and hmac.compare_digest(presented, expected[0]):
                return expected[1]
            if hmac.compare_digest(presented, self._operator):
                return OPERATOR
        except TypeError:  # not ASCII: matches nothing
            pass
        return None

    def _by_certificate(self, method: str, handler: MethodHandler) -> MethodHandler:
        """`handler` behind a check of the peer certificate, which only the call's context
        shows; built once per method."""
        cached = self._certified.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        allowed = self._roles.get(method, ANY_COMPONENT)
        wrapped = with_behaviour(
            handler,
            lambda behaviour: _unary_certified(method, allowed, behaviour),
            lambda behaviour: _stream_certified(method, allowed, behaviour),
        )
        assert wrapped is not None
        self._certified[method] = (handler, wrapped)
        return wrapped


def _authorization(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == AUTHORIZATION:
            return value if isinstance(value, str) else ""
    return ""


def _unauthenticated(method: str, presented: str) -> str:
    what = "the credential presented is not valid here" if presented else "no credential"
    return (
        f"{method}: {what}; present 'authorization: Bearer <credential>': this deployment's "
        "SHUTTLE_INTERNAL_TOKEN, or a component's credential derived from it"
    )


def _denied(method: str, role: str) -> str:
    return f"{method} is not open to the {role} role"


async def _certificate_role(method: str, allowed: frozenset[str], context: Any) -> None:
    """Set `caller_role` from the peer certificate, or end the call."""
    names = context.auth_context().get("x509_common_name") or [b""]
    role = _CERTIFICATE_ROLES.get(names[0].decode(errors="replace"))
    if role is None:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"{method}: the client certificate names no Shuttle role; its subject CN must be "
            f"{_CERTIFICATE_PREFIX}<role>, one of {', '.join((*COMPONENT_ROLES, OPERATOR))}",
        )
    elif role != OPERATOR and role not in allowed:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, _denied(method, role))
    else:
        caller_role.set(role)


def _unary_certified(method: str, allowed: frozenset[str], behaviour: Behaviour) -> Behaviour:
    async def certified(request: Any, context: Any) -> Any:
        await _certificate_role(method, allowed, context)
        return await behaviour(request, context)

    return certified


def _stream_certified(method: str, allowed: frozenset[str], behaviour: Behaviour) -> Behaviour:
    async def certified(request: Any, context: Any) -> Any:
        await _certificate_role(method, allowed, context)
        async for message in behaviour(request, context):
            yield message

    return certified


def _refusal(handler: MethodHandler | None, code: grpc.StatusCode, details: str) -> MethodHandler:
    """A handler of the same kind as `handler` that ends the call with `code`, reading no
    request it was not sent and parsing none. A stream's is an async generator, as the
    interceptors around it expect of a streaming behaviour."""

    async def refuse(request: Any, context: Any) -> None:
        await context.abort(code, details)

    async def refuse_stream(request: Any, context: Any) -> AsyncIterator[Any]:
        await context.abort(code, details)
        yield  # never reached: makes this an async generator

    if handler is None or not (handler.request_streaming or handler.response_streaming):
        return grpc.unary_unary_rpc_method_handler(refuse)
    if not handler.request_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_stream)
    if not handler.response_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.stream_stream_rpc_method_handler(refuse_stream)
