"""Mutual TLS between components, with certificates made here: the events service as its
process builds it takes only clients whose certificate its CA signed, and reads the caller's
role from that certificate, whatever token the caller holds."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.events.__main__ import build
from shuttle.grpc_auth import EXECUTOR, TOOLS, ChannelAuth, TlsFiles, credential
from shuttle.grpc_client import open_channel
from shuttle.grpc_server import GrpcService
from shuttle.settings import Settings, SettingsError
from shuttle.v1 import events_pb2, events_pb2_grpc
from tests.events.helpers import draft

TENANT = "t1"
TOKEN = "mtls-test-token-0123456789"
VALID = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Authority:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def new(cls, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (
            _builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(name, key, cert)

    def issue(self, common_name: str) -> tuple[bytes, bytes]:
        """A certificate for `common_name` at 127.0.0.1, and its key, both PEM."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            _builder(subject, self.cert.subject, key.public_key())
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def tls(self, common_name: str, trusted: bytes | None = None) -> TlsFiles:
        cert, key = self.issue(common_name)
        return TlsFiles(cert, key, trusted or self.pem)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - VALID)
        .not_valid_after(now + VALID)
    )


def tls_settings(directory: Path, tls: TlsFiles, **values: object) -> Settings:
    paths = {}
    for part in ("cert", "key", "ca"):
        path = directory / f"{part}.pem"
        path.write_bytes(getattr(tls, part))
        paths[f"grpc_tls_{part}"] = path
    return Settings(database_url="", data_dir=directory, **paths, **values)  # type: ignore[arg-type]


@dataclass
class Served:
    authority: Authority
    service: GrpcService

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.service.port}"

    def channel(self, common_name: str, authorization: str = "") -> grpc.aio.Channel:
        return open_channel(
            self.target, ChannelAuth(authorization, self.authority.tls(common_name))
        )


async def serve(tmp_path: Path, **values: object) -> AsyncIterator[Served]:
    authority = Authority.new("shuttle test CA")
    service = await build(tls_settings(tmp_path, authority.tls("shuttle-events"), **values))
    await service.start("127.0.0.1", 0)
    yield Served(authority, service)
    await service.stop(0)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async for running in serve(tmp_path):
        yield running


@pytest.fixture
async def served_with_token(tmp_path: Path) -> AsyncIterator[Served]:
    async for running in serve(tmp_path, internal_token=TOKEN):
        yield running


def create(
    channel: grpc.aio.Channel,
) -> grpc.aio.UnaryUnaryCall[events_pb2.CreateWorkflowRequest, events_pb2.Workflow]:
    return events_pb2_grpc.EventServiceStub(channel).CreateWorkflow(
        events_pb2.CreateWorkflowRequest(tenant_id=TENANT), timeout=30
    )


async def code_of(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call  # type: ignore[misc]
    return failure.value.code()


async def test_clients_without_a_certificate_of_this_ca_are_refused(served: Served) -> None:
    stranger = Authority.new("another CA")
    no_certificate = grpc.ssl_channel_credentials(root_certificates=served.authority.pem)
    foreign = stranger.tls("shuttle-executor", trusted=served.authority.pem)
    for channel in (
        open_channel(served.target),  # plaintext
        grpc.aio.secure_channel(served.target, no_certificate),
        open_channel(served.target, ChannelAuth(tls=foreign)),
    ):
        async with channel:
            assert await code_of(create(channel)) == grpc.StatusCode.UNAVAILABLE
    async with served.channel("shuttle-executor") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING  # still up


async def test_the_callers_role_is_its_certificates(served: Served) -> None:
    async with served.channel("shuttle-executor") as executor:
        workflow = await create(executor)
    async with served.channel("shuttle-gateway") as gateway:
        call = create(gateway)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await call
        assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "not open to the gateway role" in (failure.value.details() or "")
    async with served.channel("shuttle-tools") as tools:
        stub = events_pb2_grpc.EventServiceStub(tools)
        append = events_pb2.AppendRequest(
            workflow_id=workflow.workflow_id, tenant_id=TENANT, events=[draft("APPROVAL_REQUESTED")]
        )
        assert list((await stub.Append(append)).seqs) == [1]
        forged = events_pb2.AppendRequest(
            workflow_id=workflow.workflow_id, tenant_id=TENANT, events=[draft("WORKFLOW_COMPLETED")]
        )
        assert await code_of(stub.Append(forged)) == grpc.StatusCode.PERMISSION_DENIED


async def test_a_certificate_naming_no_role_is_refused(served: Served) -> None:
    async with served.channel("someone-else") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await create(channel)
    assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "subject CN must be shuttle-<role>" in (failure.value.details() or "")


async def test_with_a_token_too_both_must_pass_and_the_certificate_names_the_role(
    served_with_token: Served,
) -> None:
    served = served_with_token
    executor_credential = f"Bearer {credential(TOKEN, EXECUTOR)}"
    async with served.channel("shuttle-executor") as no_token:
        assert await code_of(create(no_token)) == grpc.StatusCode.UNAUTHENTICATED
    async with served.channel("shuttle-executor", executor_credential) as both:
        await create(both)
    # The executor's token does not make a gateway's certificate an executor's.
    async with served.channel("shuttle-gateway", executor_credential) as claiming:
        assert await code_of(create(claiming)) == grpc.StatusCode.PERMISSION_DENIED
    tools_credential = f"Bearer {credential(TOKEN, TOOLS)}"
    async with served.channel("shuttle-gateway", tools_credential) as other:
        assert await code_of(create(other)) == grpc.StatusCode.PERMISSION_DENIED


def test_two_of_the_three_files_name_the_missing_one(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    settings = Settings(grpc_tls_cert=cert, grpc_tls_key=cert)
    with pytest.raises(SettingsError, match="SHUTTLE_GRPC_TLS_CA"):
        TlsFiles.from_settings(settings)
    unreadable = Settings(grpc_tls_cert=cert, grpc_tls_key=cert, grpc_tls_ca=tmp_path / "none")
    with pytest.raises(SettingsError, match="SHUTTLE_GRPC_TLS_CA: cannot read"):
        TlsFiles.from_settings(unreadable)
