"""The models file: parsing, errors naming the bad field, and the registry built from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shuttle.llm.demo import DemoModel
from shuttle.llm.factory import build_llm, build_registry
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.registry import ModelsFileError, load_models_file, parse_models
from shuttle.settings import Settings
from shuttle.usage import TokenUsage

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "models.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_shipped_example_loads_into_a_registry_by_role_and_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test-2")
    registry = build_registry(Settings(models_file=EXAMPLE))
    assert registry.names == ["gpt-4o-mini", "deepseek-reasoner", "local-qwen", "demo"]
    general = registry.for_role("general")
    assert isinstance(general, OpenAIModel) and general.name == "gpt-4o-mini"
    reasoning = registry.for_role("reasoning")
    assert reasoning.abilities.thinking and not reasoning.abilities.tool_call
    local = registry.by_name("local-qwen")
    assert isinstance(local, OpenAIModel) and local.model == "qwen2.5:7b"
    assert isinstance(registry.by_name("demo"), DemoModel)
    assert registry.for_role("compact") is general
    with pytest.raises(ValueError, match="unknown model role 'huge'"):
        registry.for_role("huge")


def test_prices_make_the_cost_of_a_call() -> None:
    spec = parse_models(
        {
            "models": [
                {
                    "name": "m",
                    "provider": "demo",
                    "prices": {"input_per_1m": 3, "output_per_1m": 15},
                }
            ]
        }
    )
    cost = spec.models[0].prices.cost(TokenUsage(1_000_000, 100_000, cached_tokens=0))
    assert cost == pytest.approx(3 + 1.5)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "{name: b, base_url: 'http://x', prices: {input_per_1m: -1}}",
            "models[1].prices.input_per_1m: must be ≥ 0",
        ),
        ("{name: b, base_url: 'http://x', roles: [huge]}", "models[1].roles[0]: must be one of"),
        ("{name: b}", "models[1]: base_url is required for provider 'openai'"),
        ("{name: b, base_url: 'http://x', context: 5}", "models[1].context: is not a known field"),
        ("{name: a, provider: demo}", "models[1].name: 'a' is used twice"),
        ("{name: b, base_url: 'http://x', context_size: 0}", "models[1].context_size: must be > 0"),
        ("{base_url: 'http://x'}", "models[1].name: is required"),
    ],
)
def test_a_bad_entry_is_named_by_its_path(tmp_path: Path, entry: str, expected: str) -> None:
    path = write(tmp_path, f"models:\n  - {{name: a, provider: demo}}\n  - {entry}\n")
    with pytest.raises(ModelsFileError) as failure:
        load_models_file(path)
    assert expected in str(failure.value)
    assert str(path) in str(failure.value)


def test_unreadable_or_malformed_files_say_so(tmp_path: Path) -> None:
    with pytest.raises(ModelsFileError, match="cannot read the models file"):
        load_models_file(tmp_path / "missing.yaml")
    with pytest.raises(ModelsFileError, match="not valid YAML"):
        load_models_file(write(tmp_path, "models: [unclosed"))
    with pytest.raises(ModelsFileError, match="expected a mapping"):
        load_models_file(write(tmp_path, "- just a list"))
    with pytest.raises(ModelsFileError, match=r"models: List should have at least 1 item"):
        load_models_file(write(tmp_path, "models: []"))


def test_an_unset_key_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHUTTLE_TEST_NO_SUCH_KEY", raising=False)
    path = write(
        tmp_path,
        "models:\n  - {name: a, base_url: 'http://x', api_key_env: SHUTTLE_TEST_NO_SUCH_KEY}\n",
    )
    with pytest.raises(ModelsFileError, match="SHUTTLE_TEST_NO_SUCH_KEY, which is not set"):
        build_registry(Settings(models_file=path))


def test_openai_variables_alone_still_make_one_model_for_every_role() -> None:
    settings = Settings(openai_base_url="http://127.0.0.1:9/v1", openai_api_key="k", model="m")
    registry = build_registry(settings)
    llm = build_llm(settings)
    assert isinstance(llm, OpenAIModel) and llm.model == "m"
    assert all(registry.for_role(r) is registry.default for r in ("fast", "reasoning"))


def test_nothing_configured_means_the_demo_model() -> None:
    settings = Settings(openai_base_url="", openai_api_key="", models_file=None)
    assert isinstance(build_llm(settings), DemoModel)


def test_a_service_refuses_a_bad_models_file_in_one_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, "models:\n  - {name: a, base_url: 'http://x', prices: {output_per_1m: -2}}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "services.planner"],
        env={"SHUTTLE_MODELS_FILE": str(path), "SHUTTLE_PLANNER_PORT": "0", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "models[0].prices.output_per_1m: must be ≥ 0" in result.stderr
    assert "Traceback" not in result.stderr
