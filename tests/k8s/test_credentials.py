"""Every credential a pod needs comes from a Secret, and every Secret key it needs exists."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import pytest

from shuttle.settings import Settings
from tests.k8s.rendered import (
    OVERLAYS,
    ROOT,
    Doc,
    config_map,
    main_container,
    plain_env,
    render,
    secret_refs,
    secret_values,
    shuttle_deployments,
    workloads,
)

SECRET = "shuttle-secrets"
# Who needs which key of shuttle-secrets; the Deployments must reference each one.
REQUIRED = {
    "SHUTTLE_INTERNAL_TOKEN": {"gateway", "executor", "planner", "tools", "events"},
    "SHUTTLE_TICKET_SECRET": {"gateway"},
    "SHUTTLE_DATABASE_URL": {"gateway", "tools", "events"},
    "SHUTTLE_REDIS_URL": {"gateway", "tools", "events"},
}


@pytest.fixture(scope="module", params=OVERLAYS)
def manifests(request: pytest.FixtureRequest) -> list[Doc]:
    return render(str(request.param))


def test_the_required_keys_are_settings_the_code_reads() -> None:
    fields = {f"SHUTTLE_{name.upper()}" for name in Settings.model_fields}
    assert set(REQUIRED) <= fields


def test_each_component_takes_its_credentials_from_the_secret(manifests: list[Doc]) -> None:
    deployments = shuttle_deployments(manifests)
    for key, users in REQUIRED.items():
        for name, deployment in deployments.items():
            container = main_container(deployment)
            ref = secret_refs(container).get(key)
            if name in users:
                assert ref == {"name": SECRET, "key": key}, f"{name}: {key} from {ref}"
            # Never a literal: not in the ConfigMap, not in the container's own env.
            assert key not in plain_env(manifests, container), f"{name}: literal {key}"
    assert not set(REQUIRED) & set(config_map(manifests))


def test_no_secret_reference_is_optional(manifests: list[Doc]) -> None:
    """A missing key stops the pod (CreateContainerConfigError) instead of an insecure start."""
    for name, workload in workloads(manifests).items():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for variable, ref in secret_refs(container).items():
                assert not ref.get("optional", False), f"{name}: {variable} is optional"


def required_keys(manifests: list[Doc]) -> dict[str, set[str]]:
    """Every (Secret, key) the overlay's pods reference."""
    found: dict[str, set[str]] = {}
    for workload in workloads(manifests).values():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for ref in secret_refs(container).values():
                found.setdefault(ref["name"], set()).add(ref["key"])
    return found


def test_every_referenced_key_is_generated_or_documented(manifests: list[Doc]) -> None:
    """dev generates each key the pods need; prod names each one where operators look."""
    documents = {
        "k8s/README.md": (ROOT / "k8s" / "README.md").read_text(),
        "secrets-required.yaml": (ROOT / "k8s/overlays/prod/secrets-required.yaml").read_text(),
    }
    for secret, keys in required_keys(manifests).items():
        values = secret_values(manifests, secret)
        if values is not None:
            for key in keys:
                assert values.get(key), f"{secret} generates no {key}"
            continue
        assert secret == SECRET, f"{secret} is neither generated nor the documented Secret"
        for where, text in documents.items():
            missing = sorted(key for key in keys if key not in text)
            assert not missing, f"{where} does not name {missing}"


def test_generated_credentials_are_long_and_distinct(manifests: list[Doc]) -> None:
    values = secret_values(manifests, SECRET)
    if values is None:
        pytest.skip("this overlay takes the Secret as it finds it")
    token, ticket = values["SHUTTLE_INTERNAL_TOKEN"], values["SHUTTLE_TICKET_SECRET"]
    assert len(token) >= 32 and len(ticket) >= 32
    assert token != ticket


def redis_container(manifests: list[Doc]) -> dict[str, Any]:
    return main_container(workloads(manifests)["shuttle-redis"])


def test_redis_requires_the_password_the_url_carries() -> None:
    manifests = render("dev")
    container = redis_container(manifests)
    args = container["args"]
    assert "--requirepass" in args
    given = args[args.index("--requirepass") + 1]
    assert given.startswith("$(") and given.endswith(")"), "the password is not a variable"
    ref = secret_refs(container)[given[2:-1]]
    password = (secret_values(manifests, ref["name"]) or {})[ref["key"]]
    assert password
    # The probe's redis-cli authenticates with the same variable.
    assert given[2:-1] == "REDISCLI_AUTH"
    url = urlparse((secret_values(manifests, SECRET) or {})["SHUTTLE_REDIS_URL"])
    assert url.password == password
    assert url.hostname == "shuttle-redis"


def test_prod_says_its_redis_url_must_carry_a_password() -> None:
    for path in ("k8s/README.md", "k8s/overlays/prod/secrets-required.yaml"):
        assert "redis://:<password>@" in (ROOT / path).read_text(), path
