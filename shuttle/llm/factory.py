"""Builds the configured LLM: an OpenAI-compatible endpoint, else the offline demo model."""

from __future__ import annotations

from shuttle.llm.demo import DemoModel
from shuttle.llm.openai_model import OpenAIModel
from shuttle.llm.protocol import LLM
from shuttle.settings import Settings


def build_llm(settings: Settings) -> LLM:
    if settings.uses_demo_model:
        return DemoModel()
    return OpenAIModel(
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key,
        model=settings.model,
        timeout_seconds=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
    )
