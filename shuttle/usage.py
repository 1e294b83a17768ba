"""Tokens and cost of model calls, one call's or a whole workflow's, and their wire form
(`shuttle.v1.Usage`): the one usage type of every service."""

from __future__ import annotations

from dataclasses import dataclass

from shuttle.v1 import common_pb2


@dataclass(frozen=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    total_tokens: int = -1
    """Input plus output unless given: a workflow's total is what its terminal event
    reported, which the events service keeps as it was sent."""

    def __post_init__(self) -> None:
        if self.total_tokens < 0:
            object.__setattr__(self, "total_tokens", self.input_tokens + self.output_tokens)

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost_usd + other.cost_usd,
            self.total_tokens + other.total_tokens,
        )

    def as_payload(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cached_tokens": self.cached_tokens,
        }


def usage_to_proto(usage: TokenUsage) -> common_pb2.Usage:
    return common_pb2.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cached_tokens=usage.cached_tokens,
        cost_usd=usage.cost_usd,
    )


def usage_from_proto(usage: common_pb2.Usage) -> TokenUsage:
    return TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        cost_usd=usage.cost_usd,
        total_tokens=usage.total_tokens,
    )
