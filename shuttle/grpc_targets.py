"""Client targets: one address, a comma list of replicas' addresses, or a gRPC URI.

gRPC resolves one target per channel, and its round_robin policy spreads calls over every
address the target resolves to. A list of IP addresses becomes one `ipv4:` or `ipv6:` target
(those schemes take comma lists); a name (`dns:///shuttle-events-headless:50051`, or a bare
`host:port`) is resolved through DNS, so a headless Service's name reaches all its pods.
"""

from __future__ import annotations

import ipaddress
import re

# Targets gRPC resolves itself; passed on unchanged once a `dns:` one is seen to hold a port.
URI_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:")

_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?$")


class TargetError(ValueError):
    """A malformed target; the message says what is wrong and what to write instead."""


def client_target(value: str, variable: str = "") -> str:
    """The gRPC target `value` stands for; TargetError (naming `variable`) when malformed."""
    try:
        return _client_target(value.strip())
    except TargetError as exc:
        if not variable:
            raise
        raise TargetError(f"{variable}={value!r}: {exc}") from None


def _client_target(value: str) -> str:
    if not value:
        raise TargetError("empty; give host:port, a comma list of ip:port, or dns:///name:port")
    if value.startswith(URI_SCHEMES):
        if value.startswith("dns:"):
            _check_dns(value)
        return value
    if "," not in value:
        _split(value)  # one address, hostname or IP: gRPC's default (dns) resolver takes it
        return value
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise TargetError("an empty entry in the list (a stray comma?)")
    hosts = [_split(part) for part in parts]
    kinds = {_kind(host) for host, _ in hosts}
    if "name" in kinds:
        raise TargetError(
            "a list holds IP addresses only (a channel resolves one name); name the replicas "
            "by their addresses, or give one dns:///name:port whose name resolves to all of "
            "them (a headless Service)"
        )
    if kinds == {"ipv4"}:
        return "ipv4:" + ",".join(f"{host}:{port}" for host, port in hosts)
    if kinds == {"ipv6"}:
        return "ipv6:" + ",".join(f"[{host}]:{port}" for host, port in hosts)
    raise TargetError(
        "a list mixes IPv4 and IPv6 addresses, which gRPC takes in separate targets; "
        "use one family, or a dns:///name:port"
    )


def _check_dns(value: str) -> None:
    # dns:[//authority/]host:port; without a port gRPC would dial 443.
    rest = value[len("dns:") :]
    if rest.startswith("//"):
        _, slash, rest = rest[2:].partition("/")
        if not slash:
            raise TargetError("expected dns:///name:port (three slashes: no DNS server named)")
    if "," in rest:
        raise TargetError("a dns: target names one host; give a name resolving to every replica")
    _split(rest)


def _split(address: str) -> tuple[str, int]:
    """(host, port) of `host:port` or `[ipv6]:port`."""
    if address.startswith("["):
        host, bracket, port = address[1:].partition("]:")
        if not bracket:
            raise TargetError(f"{address!r} is not [ipv6]:port")
        if _kind(host) != "ipv6":
            raise TargetError(f"{host!r} in brackets is not an IPv6 address")
    else:
        host, colon, port = address.rpartition(":")
        if not colon or not host:
            raise TargetError(f"{address!r} has no port; write host:port")
        if ":" in host:
            raise TargetError(f"{address!r}: write an IPv6 address in brackets, [addr]:port")
        if _kind(host) == "name" and not _HOSTNAME.match(host):
            raise TargetError(f"{host!r} is neither an IP address nor a host name")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise TargetError(f"{address!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def _kind(host: str) -> str:
    try:
        return "ipv6" if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else "ipv4"
    except ValueError:
        return "name"
