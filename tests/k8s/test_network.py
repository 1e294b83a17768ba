"""No path from outside reaches a backend: the rendered overlays' NetworkPolicies, attacked.

Every connection below is judged by `netpol.Policies` as the API defines policies: the
source's egress and the target's ingress must both admit it. The components' calls to each
other are read from the code, so a new call without its policy fails here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from shuttle.settings import DEFAULT_GATEWAY_PORT, DEFAULT_PORTS
from tests.k8s.netpol import NAME, Endpoint, Policies
from tests.k8s.rendered import (
    OVERLAYS,
    Doc,
    callees_in_code,
    config_map,
    main_container,
    of_kind,
    plain_env,
    render,
    shuttle_deployments,
    workloads,
)

COMPONENT_PORTS = {**DEFAULT_PORTS, "gateway": DEFAULT_GATEWAY_PORT}
METRICS_PORT = 9464
# The components that keep data in PostgreSQL and Redis (the gateway: API keys, sessions and
# the task index; limits its replicas share).
STORE_USERS = {"gateway", "tools", "events"}
STORE_PORTS = {"shuttle-postgres": 5432, "shuttle-redis": 6379}
MODEL_USERS = {"executor", "planner"}
# The cluster's own address space, first and last address of each range: never reachable by
# the pods that go outside (private ranges, the shared range, link-local with the metadata
# endpoint).
CLUSTER_ADDRESSES = [
    str(address)
    for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
    for address in (ipaddress.ip_network(cidr)[0], ipaddress.ip_network(cidr)[-1])
] + ["169.254.169.254"]
PUBLIC = Endpoint.outside("203.0.113.10")
KUBE_DNS = Endpoint.pod("kube-system", {"k8s-app": "kube-dns"})


@dataclass
class Cluster:
    docs: list[Doc]
    namespace: str
    policies: Policies
    pods: dict[str, Endpoint]  # every workload's pod, by workload name

    def component(self, name: str) -> Endpoint:
        return self.pods[f"shuttle-{name}"]

    def stranger(self, labels: dict[str, str] | None = None) -> Endpoint:
        """A pod of the namespace that is no part of Shuttle."""
        return Endpoint.pod(self.namespace, labels or {NAME: "intruder"}, ip="10.244.9.9")


@pytest.fixture(scope="module", params=OVERLAYS)
def cluster(request: pytest.FixtureRequest) -> Cluster:
    docs = render(str(request.param))
    namespace = docs[0]["metadata"]["namespace"]
    pods = {
        name: Endpoint.pod(namespace, w["spec"]["template"]["metadata"]["labels"])
        for name, w in workloads(docs).items()
    }
    return Cluster(docs, namespace, Policies(docs, namespace), pods)


def components(cluster: Cluster) -> list[str]:
    return sorted(shuttle_deployments(cluster.docs))


def container_ports(cluster: Cluster, workload: str) -> set[int]:
    container = main_container(workloads(cluster.docs)[workload])
    return {p["containerPort"] for p in container["ports"]}


def test_a_default_deny_covers_every_pod_of_the_namespace(cluster: Cluster) -> None:
    deny = [
        p
        for p in of_kind(cluster.docs, "NetworkPolicy")
        if p["spec"]["podSelector"] == {}
        and p["spec"]["policyTypes"] == ["Egress"]
        and not p["spec"].get("egress")
    ]
    assert deny, "no default-deny egress policy"
    for name, pod in cluster.pods.items():
        assert cluster.policies.isolated(pod, "Egress"), f"{name}: no egress policy selects it"
        assert not cluster.policies.allows(pod, PUBLIC, 22), name


def test_each_component_reaches_exactly_the_services_it_calls(cluster: Cluster) -> None:
    calls = callees_in_code()
    for source in components(cluster):
        for target in components(cluster):
            for port in container_ports(cluster, f"shuttle-{target}"):
                expected = target in calls[source] and port == COMPONENT_PORTS[target]
                ends = (cluster.component(source), cluster.component(target), port)
                # Each side on its own: the caller may not leave for it, the callee not admit
                # it (but the gateway's HTTP port, which admits everyone).
                assert cluster.policies.egress_allows(*ends) == expected, (
                    f"{source} -> {target}:{port}"
                )
                if (target, port) != ("gateway", DEFAULT_GATEWAY_PORT):
                    assert cluster.policies.ingress_allows(*ends) == expected, (
                        f"{target} <- {source}:{port}"
                    )
        # Nor may it leave for any other pod on those ports.
        elsewhere = Endpoint.pod("elsewhere", {"app": "listener"})
        for other in (cluster.stranger(), elsewhere):
            for port in COMPONENT_PORTS.values():
                assert not cluster.policies.egress_allows(cluster.component(source), other, port), (
                    f"{source} -> {other.namespace}:{port}"
                )


def test_no_pod_but_its_callers_reaches_a_backend(cluster: Cluster) -> None:
    """A pod of the namespace, a pod elsewhere wearing a component's label, the outside."""
    backends = [name for name in components(cluster) if name != "gateway"]
    for backend in backends:
        port = COMPONENT_PORTS[backend]
        target = cluster.component(backend)
        intruders = {
            "a stranger pod": cluster.stranger(),
            "a look-alike gateway elsewhere": Endpoint.pod(
                "elsewhere", {NAME: "shuttle-gateway", "app.kubernetes.io/part-of": "shuttle"}
            ),
            "the internet": PUBLIC,
            "the data stores": cluster.pods.get("shuttle-postgres", PUBLIC),
        }
        for who, intruder in intruders.items():
            assert not cluster.policies.allows(intruder, target, port), f"{who} -> {backend}"


def test_only_the_gateway_takes_traffic_from_outside(cluster: Cluster) -> None:
    open_to_the_world = {
        (name, port)
        for name in cluster.pods
        for port in container_ports(cluster, name)
        if cluster.policies.allows(PUBLIC, cluster.pods[name], port)
    }
    assert open_to_the_world == {("shuttle-gateway", DEFAULT_GATEWAY_PORT)}
    for service in of_kind(cluster.docs, "Service"):
        if service["metadata"]["name"] != "shuttle-gateway":
            assert service["spec"].get("type", "ClusterIP") == "ClusterIP", service["metadata"]
    for ingress in of_kind(cluster.docs, "Ingress"):
        for rule in ingress["spec"].get("rules", []):
            for path in rule.get("http", {}).get("paths", []):
                assert path["backend"]["service"]["name"] == "shuttle-gateway"


def proxy_upstreams(docs: list[Doc]) -> set[str]:
    """The hosts any Envoy configuration in the overlay routes to (its clusters' addresses)."""
    hosts: set[str] = set()
    for config in of_kind(docs, "ConfigMap"):
        for text in config.get("data", {}).values():
            try:
                parsed = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if not isinstance(parsed, dict) or "static_resources" not in parsed:
                continue
            for upstream in parsed["static_resources"].get("clusters", []):
                for group in upstream.get("load_assignment", {}).get("endpoints", []):
                    for endpoint in group.get("lb_endpoints", []):
                        address = endpoint["endpoint"]["address"]["socket_address"]["address"]
                        hosts.add(address.split(".")[0])
    return hosts


def test_no_proxy_routes_to_a_backend(cluster: Cluster) -> None:
    assert proxy_upstreams(cluster.docs) <= {"shuttle-gateway"}
    # Whatever else runs in the namespace (a proxy, the data stores) reaches no backend.
    ours = {f"shuttle-{name}" for name in components(cluster)}
    for name, pod in cluster.pods.items():
        if name in ours:
            continue
        for backend, port in DEFAULT_PORTS.items():
            assert not cluster.policies.allows(pod, cluster.component(backend), port), name


def test_proxy_upstreams_are_read_from_an_envoy_config() -> None:
    """The check above can fail: a config routing grpc-web to a backend is seen."""
    envoy = {
        "static_resources": {
            "clusters": [
                {
                    "load_assignment": {
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "shuttle-events",
                                                    "port_value": 50051,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ]
                    }
                }
            ]
        }
    }
    docs = [{"kind": "ConfigMap", "data": {"envoy.yaml": yaml.safe_dump(envoy)}}]
    assert proxy_upstreams(docs) == {"shuttle-events"}


def test_every_pod_resolves_names_through_the_cluster_dns_only(cluster: Cluster) -> None:
    other_system_pod = Endpoint.pod("kube-system", {"k8s-app": "metrics-server"})
    for name in components(cluster):
        pod = cluster.component(name)
        for protocol in ("UDP", "TCP"):
            assert cluster.policies.allows(pod, KUBE_DNS, 53, protocol), name
            assert not cluster.policies.allows(pod, other_system_pod, 53, protocol), name
            assert not cluster.policies.allows(pod, PUBLIC, 53, protocol), name


def test_the_model_endpoint_and_the_web_are_outside_the_cluster_only(cluster: Cluster) -> None:
    for name in components(cluster):
        pod = cluster.component(name)
        https = name in MODEL_USERS or name == "tools"
        assert cluster.policies.allows(pod, PUBLIC, 443) == https, name
        assert cluster.policies.allows(pod, PUBLIC, 80) == (name == "tools"), name
        for address in CLUSTER_ADDRESSES:
            for port in (80, 443):
                outside = Endpoint.outside(address)
                assert not cluster.policies.allows(pod, outside, port), f"{name} -> {address}"


def test_the_tools_pod_may_not_leave_for_any_pod_on_the_web_ports(cluster: Cluster) -> None:
    """Its own egress refuses, even towards pods whose namespace admits everything."""
    tools = cluster.component("tools")
    elsewhere = Endpoint.pod("elsewhere", {"app": "web"}, ip="10.244.7.7")
    for name, pod in {**cluster.pods, "a pod elsewhere": elsewhere, "kube-dns": KUBE_DNS}.items():
        for port in (80, 443):
            assert not cluster.policies.egress_allows(tools, pod, port), name


def store_endpoints(cluster: Cluster) -> dict[str, Endpoint]:
    """PostgreSQL and Redis: pods of the namespace (dev) or addresses outside it (prod)."""
    return {name: cluster.pods.get(name, Endpoint.outside("198.51.100.20")) for name in STORE_PORTS}


def test_the_data_stores_are_reached_by_their_users_only(cluster: Cluster) -> None:
    for store, endpoint in store_endpoints(cluster).items():
        port = STORE_PORTS[store]
        for name in components(cluster):
            allowed = cluster.policies.allows(cluster.component(name), endpoint, port)
            assert allowed == (name in STORE_USERS), f"{name} -> {store}"
        if endpoint.namespace is not None:
            assert not cluster.policies.allows(cluster.stranger(), endpoint, port), store


def test_traces_reach_the_collector_the_config_names(cluster: Cluster) -> None:
    endpoint = config_map(cluster.docs).get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint:
        pytest.skip("this overlay exports no traces")
    url = urlparse(endpoint)
    assert url.hostname and url.port
    service, _, namespace = url.hostname.partition(".")
    collector = Endpoint.pod(namespace or cluster.namespace, {"app": service})
    for name in components(cluster):
        assert cluster.policies.allows(cluster.component(name), collector, url.port), name


def test_metrics_are_served_to_the_monitoring_namespaces_only(cluster: Cluster) -> None:
    monitoring = Endpoint.pod(
        "monitoring", {"app": "prometheus"}, namespace_labels={"shuttle.run/monitoring": "true"}
    )
    unlabelled = Endpoint.pod("elsewhere", {"app": "prometheus"})
    for name, deployment in shuttle_deployments(cluster.docs).items():
        container = main_container(deployment)
        assert plain_env(cluster.docs, container).get("SHUTTLE_METRICS_PORT") == str(METRICS_PORT)
        ports: dict[str, Any] = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports.get("metrics") == METRICS_PORT, name
        pod = cluster.component(name)
        assert cluster.policies.allows(monitoring, pod, METRICS_PORT), name
        for who, other in {
            "the internet": PUBLIC,
            "an unlabelled namespace": unlabelled,
            "a stranger pod": cluster.stranger(),
            "another component": cluster.component("executor"),
        }.items():
            if other != pod:
                assert not cluster.policies.allows(other, pod, METRICS_PORT), f"{who} -> {name}"
