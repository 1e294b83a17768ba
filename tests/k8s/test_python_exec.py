"""python_exec's sandbox is opt-in: the component relaxes the tools pod, and only it."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from shuttle.settings import Settings
from tests.k8s.rendered import (
    OVERLAYS,
    Doc,
    main_container,
    plain_env,
    render,
    render_with_component,
    workloads,
)

KUBERNETES_VERSION = "1.33.0"


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def sandboxed(overlay: str, workdir: Path) -> list[Doc]:
    return render_with_component(overlay, "python-exec", workdir)


def test_the_tools_pod_gets_what_bubblewrap_needs(overlay: str, tmp_path: Path) -> None:
    docs = sandboxed(overlay, tmp_path)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    tools = workloads(docs)["shuttle-tools"]
    pod = tools["spec"]["template"]["spec"]
    container = main_container(tools)
    security = container["securityContext"]
    assert pod["hostUsers"] is False
    assert security["seccompProfile"] == {"type": "Unconfined"}
    assert security["appArmorProfile"] == {"type": "Unconfined"}
    assert security["procMount"] == "Unmasked"
    assert plain_env(docs, container)["SHUTTLE_PYTHON_EXEC_ENABLED"] == "true"
    assert "python_exec_enabled" in Settings.model_fields
    # Still non-root, read-only, without privilege escalation or capabilities.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in security


def test_nothing_but_the_tools_pod_changes(overlay: str, tmp_path: Path) -> None:
    plain = workloads(render(overlay))
    with_sandbox = workloads(sandboxed(overlay, tmp_path))
    assert set(plain) == set(with_sandbox)
    changed = {name for name in plain if plain[name] != with_sandbox[name]}
    assert changed == {"shuttle-tools"}


def test_without_the_component_no_pod_is_relaxed(overlay: str) -> None:
    docs = render(overlay)
    for name, workload in workloads(docs).items():
        pod = workload["spec"]["template"]["spec"]
        assert pod.get("hostUsers", True) is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in pod["containers"]:
            security = container.get("securityContext", {})
            assert "seccompProfile" not in security, name
            assert "appArmorProfile" not in security, name
            assert security.get("procMount", "Default") == "Default", name
            env = plain_env(docs, container)
            assert env.get("SHUTTLE_PYTHON_EXEC_ENABLED", "false") == "false", name
