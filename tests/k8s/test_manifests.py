"""The Kubernetes manifests render, validate strictly offline, and match what the code reads."""

from __future__ import annotations

import importlib.util
from typing import Any

import kubernetes_validate
import pytest

from gateway.app import create_app
from shuttle.settings import DEFAULT_GATEWAY_PORT, DEFAULT_PORTS, Settings
from tests.k8s.rendered import (
    OVERLAYS,
    ROOT,
    callers_in_code,
    of_kind,
    render,
    shuttle_deployments,
)

KUBERNETES_VERSION = "1.33.0"
STANDARD_PREFIXES = ("OTEL_", "OPENAI_")


@pytest.fixture(scope="module", params=OVERLAYS)
def manifests(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(str(request.param))


def settings_variables() -> set[str]:
    return {f"SHUTTLE_{name.upper()}" for name in Settings.model_fields}


def test_every_resource_validates_strictly(manifests: list[dict[str, Any]]) -> None:
    for doc in manifests:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_service_and_the_gateway_is_deployed(manifests: list[dict[str, Any]]) -> None:
    assert set(shuttle_deployments(manifests)) == {*DEFAULT_PORTS, "gateway"}
    kinds = {d["kind"] for d in manifests}
    assert {"HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
    scaled = {
        d["spec"]["scaleTargetRef"]["name"] for d in of_kind(manifests, "HorizontalPodAutoscaler")
    }
    assert scaled == {"shuttle-gateway", "shuttle-executor", "shuttle-tools"}


def test_every_variable_set_is_one_the_code_reads(manifests: list[dict[str, Any]]) -> None:
    known = settings_variables()
    names: set[str] = set()
    for config in of_kind(manifests, "ConfigMap"):
        if config["metadata"]["name"].startswith("shuttle-config"):
            names |= set(config["data"])
    for secret in of_kind(manifests, "Secret"):
        if secret["metadata"]["name"] == "shuttle-secrets":
            names |= set(secret.get("data", {})) | set(secret.get("stringData", {}))
    for deployment in shuttle_deployments(manifests).values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            names |= {env["name"] for env in container.get("env", [])}
    unknown = {n for n in names if not n.startswith(STANDARD_PREFIXES) and n not in known}
    assert not unknown, f"variables no setting reads: {sorted(unknown)}"


def test_ports_probes_and_modules_match_the_services(manifests: list[dict[str, Any]]) -> None:
    expected_ports = {**DEFAULT_PORTS, "gateway": DEFAULT_GATEWAY_PORT}
    services = {s["metadata"]["name"]: s for s in of_kind(manifests, "Service")}
    for name, deployment in shuttle_deployments(manifests).items():
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        port = expected_ports[name]
        assert env[f"SHUTTLE_{name.upper()}_PORT"] == str(port)
        assert env[f"SHUTTLE_{name.upper()}_HOST"] == "0.0.0.0"
        named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        main_port = "http" if name == "gateway" else "grpc"
        assert named_ports[main_port] == port
        module = container["args"][-1]
        assert container["args"][:2] == ["python", "-m"]
        assert importlib.util.find_spec(module) is not None, module
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            spec = container[probe]
            if name == "gateway":
                assert spec["httpGet"]["port"] == "http"
            else:
                assert spec["grpc"]["port"] == port
        service = services[f"shuttle-{name}"]
        assert any(p["targetPort"] == main_port for p in service["spec"]["ports"])


def test_gateway_probe_paths_exist() -> None:
    paths = {getattr(route, "path", "") for route in create_app(Settings()).routes}
    assert {"/healthz", "/readyz"} <= paths


def test_network_policies_admit_only_declared_ports(manifests: list[dict[str, Any]]) -> None:
    deployments = shuttle_deployments(manifests)
    policies = {p["metadata"]["name"]: p for p in of_kind(manifests, "NetworkPolicy")}
    assert "shuttle-default-deny-ingress" in policies
    for name, deployment in deployments.items():
        container_ports = {
            p["containerPort"]
            for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        }
        policy = policies[f"shuttle-{name}"]
        admitted = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert admitted <= container_ports | {9464}
        sources = [rule.get("from") for rule in policy["spec"]["ingress"]]
        if name != "gateway":
            assert all(sources), f"{name} admits traffic from anywhere"
    gateway_rules = policies["shuttle-gateway"]["spec"]["ingress"]
    assert any("from" not in rule for rule in gateway_rules)


def test_pods_run_non_root_with_read_only_roots_and_limits(manifests: list[dict[str, Any]]) -> None:
    for deployment in of_kind(manifests, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["terminationGracePeriodSeconds"] >= 20
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            assert {"cpu", "memory"} <= set(container["resources"]["limits"])


def test_the_dockerfile_builds_the_image_the_manifests_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.count("FROM ") >= 2  # multi-stage
    assert "USER 10001" in dockerfile
    assert "grpc_tools.protoc -I proto" in dockerfile


def test_each_service_admits_exactly_its_callers(manifests: list[dict[str, Any]]) -> None:
    policies = {p["metadata"]["name"]: p for p in of_kind(manifests, "NetworkPolicy")}
    for service, callers in callers_in_code().items():
        grpc_rule = policies[f"shuttle-{service}"]["spec"]["ingress"][0]
        admitted = {
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"].removeprefix("shuttle-")
            for peer in grpc_rule["from"]
            if "podSelector" in peer
        }
        assert admitted == callers, service


def test_gateways_may_be_many_and_share_the_ticket_secret(
    manifests: list[dict[str, Any]],
) -> None:
    gateway = shuttle_deployments(manifests)["gateway"]
    (container,) = gateway["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    most = max(
        [gateway["spec"]["replicas"]]
        + [
            hpa["spec"]["maxReplicas"]
            for hpa in of_kind(manifests, "HorizontalPodAutoscaler")
            if hpa["spec"]["scaleTargetRef"]["name"] == "shuttle-gateway"
        ]
    )
    # As many as may run, so a gateway without the secret refuses to start.
    assert int(env["SHUTTLE_GATEWAY_REPLICAS"]["value"]) >= most > 1
    secret = env["SHUTTLE_TICKET_SECRET"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "shuttle-secrets", "key": "SHUTTLE_TICKET_SECRET"}
