"""SSRF guard: which addresses a tool may connect to, checked after DNS resolution.

Loopback, private, link-local (cloud metadata at 169.254.169.254 included), shared,
multicast, reserved and unspecified addresses are refused unless allow-listed, for IPv4,
IPv6 and IPv4 addresses embedded in IPv6. The caller connects to the vetted address itself,
so a name that resolves differently a moment later (DNS rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from services.tools.catalog import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# (host, port) -> addresses; the system resolver by default.
Resolver = Callable[[str, int], Awaitable[list[str]]]

# Not covered by ipaddress's flags on every Python version, or worth naming explicitly.
_EXTRA_BLOCKED: tuple[Network, ...] = (
    ipaddress.ip_network("100.64.0.0/10"),  # carrier-grade NAT (shared address space)
    ipaddress.ip_network("169.254.0.0/16"),  # link-local, cloud metadata
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS metadata over IPv6
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64: embeds an IPv4 address
)


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def blocked_reason(address: IPAddress) -> str | None:
    """Why a connection to `address` is refused, or None if it is a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            return blocked_reason(embedded)
        if address in ipaddress.ip_network("64:ff9b::/96"):
            return blocked_reason(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("private", address.is_private),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("unspecified", address.is_unspecified),
    )
    for name, hit in checks:
        if hit:
            return name
    if any(address in network for network in _EXTRA_BLOCKED if network.version == address.version):
        return "internal"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """Hosts (exact names, case-insensitive) and networks (CIDR) exempt from the guard."""

    allow_hosts: frozenset[str] = frozenset()
    allow_networks: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_list(
        cls, entries: Sequence[str], resolver: Resolver = system_resolver
    ) -> AddressPolicy:
        hosts, networks = set(), []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                hosts.add(entry.strip().lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks), resolver)

    def _allowed(self, host: str, address: IPAddress) -> bool:
        return host.lower().rstrip(".") in self.allow_hosts or any(
            address in network
            for network in self.allow_networks
            if network.version == address.version
        )

    async def vet(self, host: str, port: int) -> str:
        """Resolve `host` and return one address it is safe to connect to; ToolError if none.

        Every resolved address must pass: a name that also resolves to an internal address
        is refused, since a later lookup could return that one.
        """
        try:
            literal: IPAddress | None = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [literal]
        else:
            try:
                resolved = await self.resolver(host, port)
            except (OSError, UnicodeError) as exc:
                raise ToolError(f"cannot resolve host {host!r}: {exc}") from None
            addresses = []
            for text in resolved:
                try:
                    addresses.append(ipaddress.ip_address(text.split("%")[0]))
                except ValueError:
                    continue
            if not addresses:
                raise ToolError(f"host {host!r} has no usable address")
        for address in addresses:
            reason = blocked_reason(address)
            if reason is not None and not self._allowed(host, address):
                shown = host if literal is not None else f"{host} ({address})"
                raise ToolError(
                    f"refused to connect to {shown}: it is a {reason} address, which tools may "
                    "not reach; only public hosts are allowed"
                )
        return str(addresses[0])
