"""The manifests spread calls over every pod: clients dial headless Services' DNS names, and
every gRPC server ends its connections, so clients re-resolve and new pods get calls."""

from __future__ import annotations

from typing import Any

import pytest

from shuttle.settings import DEFAULT_PORTS, Settings
from tests.k8s.rendered import (
    OVERLAYS,
    main_container,
    of_kind,
    plain_env,
    render,
    shuttle_deployments,
)

Doc = dict[str, Any]


@pytest.fixture(scope="module", params=OVERLAYS)
def manifests(request: pytest.FixtureRequest) -> list[Doc]:
    return render(str(request.param))


def pod_labels(deployment: Doc) -> dict[str, str]:
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def test_every_client_target_is_a_headless_service_of_its_pods(manifests: list[Doc]) -> None:
    services = {s["metadata"]["name"]: s for s in of_kind(manifests, "Service")}
    deployments = shuttle_deployments(manifests)
    namespace = deployments["events"]["metadata"].get("namespace", "")
    for name, deployment in deployments.items():
        env = plain_env(manifests, main_container(deployment))
        targets = {k: v for k, v in env.items() if k.startswith("SHUTTLE_") and k.endswith("_ADDR")}
        assert set(targets) == {f"SHUTTLE_{s.upper()}_ADDR" for s in DEFAULT_PORTS}, name
        for variable, target in targets.items():
            service_name = variable.removeprefix("SHUTTLE_").removesuffix("_ADDR").lower()
            assert target.startswith("dns:///"), f"{name}: {variable}={target}"
            # Parses as the code reads it.
            assert (
                Settings.model_validate({f"{service_name}_addr": target}).grpc_target(service_name)
                == target
            )
            host, _, port = target.removeprefix("dns:///").rpartition(":")
            service_host, _, rest = host.partition(".")
            assert rest in ("", namespace, f"{namespace}.svc"), f"{variable}: another namespace"
            service = services[service_host]
            assert service["spec"].get("clusterIP") == "None", f"{service_host} is not headless"
            assert int(port) == DEFAULT_PORTS[service_name]
            assert int(port) in [p["port"] for p in service["spec"]["ports"]]
            selected = service["spec"]["selector"].items()
            assert selected <= pod_labels(deployments[service_name]).items(), service_host


def test_the_services_clients_knew_stay(manifests: list[Doc]) -> None:
    # Port-forwards, the gateway's and operators' docs and mTLS names use these.
    services = {s["metadata"]["name"]: s for s in of_kind(manifests, "Service")}
    for name in DEFAULT_PORTS:
        assert services[f"shuttle-{name}"]["spec"].get("clusterIP") != "None"
        assert services[f"shuttle-{name}-headless"]["spec"]["clusterIP"] == "None"


def test_every_grpc_server_sets_a_maximum_connection_age(manifests: list[Doc]) -> None:
    for name, deployment in shuttle_deployments(manifests).items():
        if name == "gateway":
            continue
        env = plain_env(manifests, main_container(deployment))
        age = env.get("SHUTTLE_GRPC_MAX_CONNECTION_AGE_SECONDS")
        grace = env.get("SHUTTLE_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS")
        assert age is not None and grace is not None, name
        settings = Settings.model_validate(
            {
                "grpc_max_connection_age_seconds": age,
                "grpc_max_connection_age_grace_seconds": grace,
            }
        )
        assert settings.grpc_max_connection_age_seconds > 0, name
        assert settings.grpc_max_connection_age_grace_seconds > 0, name


def test_every_tools_pod_mounts_one_shared_workspace_volume(manifests: list[Doc]) -> None:
    tools = shuttle_deployments(manifests)["tools"]
    container = main_container(tools)
    workspace_dir = plain_env(manifests, container)["SHUTTLE_TOOL_WORKSPACE_DIR"]
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in tools["spec"]["template"]["spec"]["volumes"]}
    claim_name = volumes[mounted[workspace_dir]]["persistentVolumeClaim"]["claimName"]
    claims = {c["metadata"]["name"]: c for c in of_kind(manifests, "PersistentVolumeClaim")}
    assert claims[claim_name]["spec"]["accessModes"] == ["ReadWriteMany"]
