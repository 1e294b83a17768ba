"""`shuttle up --replicas SPEC`: how many of each service, where each one listens.

Replica i (from 0) of a gRPC service listens on its base port + 10*i (50054, 50064, …);
gateways take consecutive ports from SHUTTLE_GATEWAY_PORT. With SHUTTLE_METRICS_PORT set,
each process serves its metrics on a port of its own counted from it, in start order.
Replica 0 keeps the service's
plain name (`executor`, `executor.log`), the others are `executor-2`, `executor-3`, ….
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from shuttle.settings import Settings

# Start order: what the executor calls must be up before it.
GRPC_SERVICES = ("events", "tools", "planner", "executor")
ALL_SERVICES = (*GRPC_SERVICES, "gateway")
GRPC_PORT_STEP = 10
MAX_REPLICAS = 9  # a tenth would reach the next service's base port (50051 + 10*9 < 50152)

SPEC_HELP = (
    "give a number (that many of every service) or a list such as "
    "executor=3,gateway=2 (services not named: 1)"
)


class ReplicaSpecError(ValueError):
    """A malformed --replicas, or replicas without the shared state they need."""


@dataclass(frozen=True)
class Endpoint:
    service: str
    replica: int
    """From 1; replica 1 has the service's plain name."""
    host: str
    port: int
    metrics_port: int = 0
    """Its own metrics port (SHUTTLE_METRICS_PORT + its place in the start order); 0: off."""

    @property
    def name(self) -> str:
        return self.service if self.replica == 1 else f"{self.service}-{self.replica}"

    @property
    def variable(self) -> str:
        return f"SHUTTLE_{self.service.upper()}_PORT"


def parse_spec(spec: str) -> dict[str, int]:
    """Replicas per service from SPEC; ReplicaSpecError says what is wrong."""
    text = spec.strip()
    if re.fullmatch(r"\d+", text):
        return {service: _count(text, spec) for service in ALL_SERVICES}
    counts = dict.fromkeys(ALL_SERVICES, 1)
    seen: set[str] = set()
    for part in text.split(","):
        service, equals, number = (piece.strip() for piece in part.partition("="))
        if not equals or service not in counts:
            raise ReplicaSpecError(
                f"--replicas {spec!r}: {part.strip()!r} is not service=count "
                f"(services: {', '.join(ALL_SERVICES)}); {SPEC_HELP}"
            )
        if service in seen:
            raise ReplicaSpecError(f"--replicas {spec!r}: {service} is named twice")
        seen.add(service)
        counts[service] = _count(number, spec)
    return counts


def _count(number: str, spec: str) -> int:
    if not re.fullmatch(r"\d+", number) or not 1 <= int(number) <= MAX_REPLICAS:
        raise ReplicaSpecError(
            f"--replicas {spec!r}: {number!r} is not a count from 1 to {MAX_REPLICAS}; {SPEC_HELP}"
        )
    return int(number)


def is_replicated(counts: Mapping[str, int]) -> bool:
    return any(count > 1 for count in counts.values())


def check_shared_state(settings: Settings, counts: Mapping[str, int]) -> None:
    """Replicas share their state through PostgreSQL and Redis: refuse without them."""
    if not is_replicated(counts):
        return
    postgres = settings.database_url.startswith(("postgresql", "postgres:"))
    if not postgres or not settings.redis_url:
        raise ReplicaSpecError(
            "--replicas needs shared state: set SHUTTLE_DATABASE_URL to a PostgreSQL URL "
            "(postgresql+asyncpg://…) and SHUTTLE_REDIS_URL (redis://…)"
        )


def endpoints(settings: Settings, counts: Mapping[str, int] | None = None) -> list[Endpoint]:
    """Every process of the launch in start order: all replicas of one service together."""
    counts = counts or {}
    found = []
    for service in GRPC_SERVICES:
        host, port = settings.grpc_bind(service)
        found += [
            Endpoint(service, i + 1, host, port + GRPC_PORT_STEP * i)
            for i in range(counts.get(service, 1))
        ]
    found += [
        Endpoint("gateway", i + 1, settings.gateway_host, settings.gateway_port + i)
        for i in range(counts.get("gateway", 1))
    ]
    if settings.metrics_port:
        # One port per process: processes on one host cannot share one.
        found = [
            replace(point, metrics_port=settings.metrics_port + i) for i, point in enumerate(found)
        ]
    return found


def client_targets(points: list[Endpoint]) -> dict[str, str]:
    """SHUTTLE_<SERVICE>_ADDR for each gRPC service: every replica's address, comma-listed."""
    targets: dict[str, list[str]] = {}
    for point in points:
        if point.service in GRPC_SERVICES:
            host = "127.0.0.1" if point.host in ("0.0.0.0", "::", "") else point.host
            targets.setdefault(point.service, []).append(f"{host}:{point.port}")
    return {f"SHUTTLE_{service.upper()}_ADDR": ",".join(a) for service, a in targets.items()}
