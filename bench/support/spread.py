"""Spread statistics of samples: a median with its quartiles, nearest-rank quantiles, latency
summaries."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Spread:
    """A median with its quartiles and extremes, over repeats or samples."""

    median: float
    p25: float
    p75: float
    low: float
    high: float
    count: int

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        if not samples:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, 0)
        ordered = sorted(samples)
        if len(ordered) == 1:
            p25 = p75 = ordered[0]
        else:
            quartiles = statistics.quantiles(ordered, n=4, method="inclusive")
            p25, p75 = quartiles[0], quartiles[2]
        return cls(statistics.median(ordered), p25, p75, ordered[0], ordered[-1], len(ordered))

    def scaled(self, factor: float) -> Spread:
        return Spread(
            self.median * factor,
            self.p25 * factor,
            self.p75 * factor,
            self.low * factor,
            self.high * factor,
            self.count,
        )

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.median:.2f} [{self.p25:.2f}-{self.p75:.2f}]"


def quantile(samples: list[float], fraction: float) -> float:
    """The sample at `fraction` of the sorted samples (nearest rank); NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "p50": quantile(samples_ms, 0.50),
        "p95": quantile(samples_ms, 0.95),
        "p99": quantile(samples_ms, 0.99),
        "max": max(samples_ms) if samples_ms else float("nan"),
        "count": len(samples_ms),
    }
