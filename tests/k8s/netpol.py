"""Which connections a namespace's NetworkPolicies allow, as the Kubernetes API defines them.

A connection is allowed when the source's egress policies and the destination's ingress
policies both admit it; a pod no policy of a direction selects is open in that direction.
Pods are taken to be matched by `ipBlock` rules too (some network plugins do so), which is
the stricter reading for a policy that means to keep the cluster out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Doc = dict[str, Any]
NAME = "app.kubernetes.io/name"


@dataclass(frozen=True)
class Endpoint:
    """One side of a connection: a pod (with its namespace) or an address outside the cluster."""

    ip: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def pod(
        cls,
        namespace: str,
        labels: Mapping[str, str],
        ip: str = "10.244.3.7",
        namespace_labels: Mapping[str, str] | None = None,
    ) -> Endpoint:
        own = {"kubernetes.io/metadata.name": namespace} | dict(namespace_labels or {})
        return cls(ip=ip, namespace=namespace, labels=dict(labels), namespace_labels=own)

    @classmethod
    def outside(cls, ip: str) -> Endpoint:
        return cls(ip=ip)


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions); {} selects everything."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        present = key in labels
        matched = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]
        if not matched:
            return False
    return True


def in_block(block: Mapping[str, Any], ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    network = ipaddress.ip_network(block["cidr"])
    if address.version != network.version or address not in network:
        return False
    return not any(address in ipaddress.ip_network(cidr) for cidr in block.get("except", []))


class Policies:
    """The NetworkPolicies of one namespace."""

    def __init__(self, docs: list[Doc], namespace: str) -> None:
        self.namespace = namespace
        self.policies = [
            d
            for d in docs
            if d["kind"] == "NetworkPolicy" and d["metadata"].get("namespace") == namespace
        ]

    def _applying(self, pod: Endpoint, direction: str) -> list[Doc]:
        if pod.namespace != self.namespace:
            return []
        found = []
        for policy in self.policies:
            spec = policy["spec"]
            types = spec.get("policyTypes") or (
                ["Ingress", "Egress"] if "egress" in spec else ["Ingress"]
            )
            if direction in types and selects(spec["podSelector"], pod.labels):
                found.append(policy)
        return found

    def isolated(self, pod: Endpoint, direction: str) -> bool:
        return bool(self._applying(pod, direction))

    def _peer_matches(self, peer: Mapping[str, Any], other: Endpoint) -> bool:
        if "ipBlock" in peer:
            return in_block(peer["ipBlock"], other.ip)
        if other.namespace is None:  # selectors match pods only
            return False
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], other.namespace_labels):
                return False
        elif other.namespace != self.namespace:
            return False
        return selects(peer.get("podSelector", {}), other.labels)

    @staticmethod
    def _port_matches(rule: Mapping[str, Any], port: int, protocol: str) -> bool:
        ports = rule.get("ports") or []
        if not ports:
            return True
        for entry in ports:
            if entry.get("protocol", "TCP") != protocol:
                continue
            if "port" not in entry:
                return True
            assert isinstance(entry["port"], int), f"named port {entry['port']!r}: use numbers"
            if entry["port"] <= port <= entry.get("endPort", entry["port"]):
                return True
        return False

    def _admits(self, pod: Endpoint, other: Endpoint, port: int, protocol: str, way: str) -> bool:
        direction, section, peers_key = {
            "out": ("Egress", "egress", "to"),
            "in": ("Ingress", "ingress", "from"),
        }[way]
        applying = self._applying(pod, direction)
        if not applying:
            return True
        for policy in applying:
            for rule in policy["spec"].get(section, []):
                peers = rule.get(peers_key) or []
                if (not peers or any(self._peer_matches(p, other) for p in peers)) and (
                    self._port_matches(rule, port, protocol)
                ):
                    return True
        return False

    def egress_allows(
        self, source: Endpoint, target: Endpoint, port: int, protocol: str = "TCP"
    ) -> bool:
        """Whether `source`'s own policies let it open the connection, whatever `target` admits."""
        return self._admits(source, target, port, protocol, "out")

    def ingress_allows(
        self, source: Endpoint, target: Endpoint, port: int, protocol: str = "TCP"
    ) -> bool:
        """Whether `target`'s own policies admit the connection, whatever `source` may open."""
        return self._admits(target, source, port, protocol, "in")

    def allows(self, source: Endpoint, target: Endpoint, port: int, protocol: str = "TCP") -> bool:
        """Whether `source` may open a connection to `target` on `port`."""
        return self.egress_allows(source, target, port, protocol) and self.ingress_allows(
            source, target, port, protocol
        )
