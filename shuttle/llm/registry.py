"""The models file: named OpenAI-compatible endpoints with roles, abilities and prices.

YAML, validated by pydantic; a bad entry is reported with its path, for example
``models[2].prices.input_per_1m: must be ≥ 0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shuttle.llm.protocol import Abilities, Role
from shuttle.settings import SettingsError
from shuttle.usage import TokenUsage


class ModelsFileError(SettingsError):
    """The models file cannot be used; the message names the file and the bad field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Prices(_Strict):
    """USD per one million tokens."""

    input_per_1m: float = Field(0.0, ge=0)
    output_per_1m: float = Field(0.0, ge=0)
    cached_input_per_1m: float | None = Field(None, ge=0)
    """Price of prompt tokens served from the provider's cache; unset means `input_per_1m`."""

    def cost(self, usage: TokenUsage) -> float:
        cached = min(usage.cached_tokens, usage.input_tokens)
        cached_price = (
            self.input_per_1m if self.cached_input_per_1m is None else self.cached_input_per_1m
        )
        return (
            (usage.input_tokens - cached) * self.input_per_1m
            + cached * cached_price
            + usage.output_tokens * self.output_per_1m
        ) / 1_000_000


class AbilitiesSpec(_Strict):
    tool_call: bool = True
    tool_choice: bool = True
    json_mode: bool = False
    streaming: bool = True
    thinking: bool = False

    def to_abilities(self) -> Abilities:
        return Abilities(**self.model_dump())


def _general() -> list[Role]:
    return ["general"]


class ModelSpec(_Strict):
    """One model at one endpoint."""

    name: str = Field(min_length=1)
    """How plans and callers refer to it (`model_hint`)."""
    provider: Literal["openai", "demo"] = "openai"
    """`openai`: any OpenAI-compatible endpoint; `demo`: the built-in offline model."""
    model: str = ""
    """The name sent to the endpoint; empty means `name`."""
    base_url: str = ""
    api_key: str = ""
    api_key_env: str = ""
    """Environment variable holding the key, so the file itself holds no secret."""
    roles: list[Role] = Field(default_factory=lambda: _general(), min_length=1)
    abilities: AbilitiesSpec = Field(default_factory=AbilitiesSpec)
    context_size: int = Field(128_000, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)
    prices: Prices = Field(default_factory=Prices)
    timeout_seconds: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _endpoint_for_openai(self) -> ModelSpec:
        if self.provider == "openai" and not self.base_url:
            raise ValueError("base_url is required for provider 'openai'")
        if self.api_key and self.api_key_env:
            raise ValueError("give api_key or api_key_env, not both")
        return self

    @property
    def stated_abilities(self) -> frozenset[str]:
        """The abilities the file gives explicitly (a refusal found later does not change
        them); the rest are defaults."""
        if "abilities" not in self.model_fields_set:
            return frozenset()
        return frozenset(self.abilities.model_fields_set)

    @property
    def wire_model(self) -> str:
        return self.model or self.name


class ModelsFile(_Strict):
    models: list[ModelSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> ModelsFile:
        seen: set[str] = set()
        for index, spec in enumerate(self.models):
            if spec.name in seen:
                raise ValueError(f"models[{index}].name: {spec.name!r} is used twice")
            seen.add(spec.name)
        return self


def _path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_MESSAGES = {
    "greater_than_equal": "must be ≥ {ge}",
    "greater_than": "must be > {gt}",
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "literal_error": "must be one of {expected}",
}


def _describe(error: Mapping[str, Any]) -> str:
    loc = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    template = _MESSAGES.get(str(error["type"]))
    ctx = error.get("ctx") or {}
    message = template.format(**ctx) if template else str(error["msg"])
    if message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
    path = _path(loc)
    return f"{path}: {message}" if path else message


def parse_models(data: Any, source: str = "models file") -> ModelsFile:
    try:
        return ModelsFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors())
        raise ModelsFileError(f"{source}: {problems}") from None


def load_models_file(path: Path) -> ModelsFile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelsFileError(f"{path}: cannot read the models file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelsFileError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ModelsFileError(f"{path}: expected a mapping with a 'models' list")
    return parse_models(data, str(path))
