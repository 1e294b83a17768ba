"""Builds the configured models: a models file, else OPENAI_BASE_URL, else the offline demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from shuttle.llm.demo import DemoModel
from shuttle.llm.openai_model import DEFAULT_ABILITIES, ModelOptions, OpenAIModel
from shuttle.llm.protocol import LLM, ROLES, Role
from shuttle.llm.registry import ModelsFileError, ModelSpec, load_models_file
from shuttle.llm.retry import RetryPolicy
from shuttle.llm.traced import TracedLLM
from shuttle.settings import Settings, process_environment


@dataclass(frozen=True)
class RegisteredModel:
    name: str
    roles: tuple[Role, ...]
    llm: LLM
    context_size: int = 128_000


class ModelRegistry:
    """The models a process may use, by name (`model_hint`) and by role."""

    def __init__(self, models: Sequence[RegisteredModel]) -> None:
        if not models:
            raise ValueError("a model registry needs at least one model")
        self._models = list(models)

    @property
    def names(self) -> list[str]:
        return [m.name for m in self._models]

    @property
    def roster(self) -> list[tuple[str, tuple[Role, ...]]]:
        """Each model's name and roles, in the order they were configured."""
        return [(m.name, m.roles) for m in self._models]

    @property
    def default(self) -> LLM:
        return self.for_role("general")

    def for_role(self, role: str) -> LLM:
        """The first model with `role`, else the first general one, else the first listed."""
        if role and role not in ROLES:
            raise ValueError(f"unknown model role {role!r}; use one of {', '.join(ROLES)}")
        for wanted in (role or "general", "general"):
            for entry in self._models:
                if wanted in entry.roles:
                    return entry.llm
        return self._models[0].llm

    def by_name(self, name: str) -> LLM | None:
        return next((m.llm for m in self._models if m.name == name), None)

    async def close(self) -> None:
        """Close the models' HTTP connections (aiohttp reports a session left open)."""
        for entry in self._models:
            close = getattr(entry.llm, "close", None)
            if close is not None:
                await close()

    def traced(self) -> ModelRegistry:
        """The same models, each call a span and a metric sample."""
        return ModelRegistry([replace(m, llm=TracedLLM(m.llm)) for m in self._models])


def build_registry(settings: Settings) -> ModelRegistry:
    """Raises ModelsFileError (naming the file and field) when the models file is unusable."""
    policy = RetryPolicy(
        max_retries=settings.llm_max_retries,
        base_delay_seconds=settings.llm_retry_base_seconds,
        max_delay_seconds=settings.llm_retry_max_seconds,
    )
    if settings.models_file is not None:
        spec = load_models_file(settings.models_file)
        env = process_environment()
        return ModelRegistry(
            [_from_spec(model, settings, policy, env) for model in spec.models],
        )
    if settings.uses_demo_model:
        return ModelRegistry([RegisteredModel("shuttle-demo", ROLES, DemoModel())])
    llm = OpenAIModel(
        settings.openai_base_url,
        settings.openai_api_key,
        settings.model,
        settings.llm_timeout_seconds,
        settings.llm_max_retries,
        options=ModelOptions(
            abilities=DEFAULT_ABILITIES,
            retry=policy,
            timeout_seconds=settings.llm_timeout_seconds,
            max_output_tokens=settings.llm_max_output_tokens,
            http_client=settings.llm_http_client,
        ),
    )
    return ModelRegistry([RegisteredModel(settings.model or "default", ROLES, llm)])


def _from_spec(
    spec: ModelSpec, settings: Settings, policy: RetryPolicy, env: Mapping[str, str]
) -> RegisteredModel:
    roles = tuple(spec.roles)
    if spec.provider == "demo":
        return RegisteredModel(spec.name, roles, DemoModel(), spec.context_size)
    api_key = spec.api_key
    if spec.api_key_env:
        if spec.api_key_env not in env:
            raise ModelsFileError(
                f"{settings.models_file}: model {spec.name!r}: api_key_env names "
                f"{spec.api_key_env}, which is not set"
            )
        api_key = env[spec.api_key_env]
    timeout = spec.timeout_seconds or settings.llm_timeout_seconds
    options = ModelOptions(
        name=spec.name,
        abilities=spec.abilities.to_abilities(),
        stated=spec.stated_abilities,
        prices=spec.prices,
        context_size=spec.context_size if "context_size" in spec.model_fields_set else None,
        max_output_tokens=spec.max_output_tokens or settings.llm_max_output_tokens,
        retry=policy,
        timeout_seconds=timeout,
        http_client=settings.llm_http_client,
    )
    llm = OpenAIModel(
        spec.base_url,
        api_key,
        spec.wire_model,
        timeout,
        policy.max_retries,
        options=options,
    )
    return RegisteredModel(spec.name, roles, llm, spec.context_size)


def build_llm(settings: Settings) -> LLM:
    """The general-role model (what the executor's agents use)."""
    return build_registry(settings).default
