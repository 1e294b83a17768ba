"""What a report section needs: the saved results and where its charts go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .load import Results

Chart = Callable[[dict[str, Any], Path], Path]


@dataclass
class Context:
    results: Results
    images: Path
    """Where the PNGs are written."""
    link_prefix: str
    """The images directory as the markdown file links to it."""

    def chart(self, name: str, draw: Chart, figures: dict[str, Any], alt: str) -> str:
        draw(figures, self.images / f"{name}.png")
        return f"![{alt}]({self.link_prefix}/{name}.png)"


def missing(name: str) -> str:
    return f"*Not measured in this run (`python -m bench --only {name}`).*"
