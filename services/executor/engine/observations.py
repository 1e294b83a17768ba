"""What the model sees of a tool's outcome: artifacts only as short summaries."""

from __future__ import annotations

from shuttle.tool_calls import ToolOutcome

OBSERVATION_HEAD_CHARS = 300


def model_observation(outcome: ToolOutcome) -> str:
    """The observation for the model. A tool that produced artifacts (HTML, Markdown, files)
    gets a summary instead of their content, so the model does not paste them back."""
    if not outcome.artifacts:
        return outcome.observation
    lines = [
        f"[Artifact generated: {a.name}] ({a.mime_type or 'file'}, {a.size_bytes} bytes). "
        "The content is shown to the user as a preview; do not repeat it."
        for a in outcome.artifacts
    ]
    head = outcome.observation.strip()[:OBSERVATION_HEAD_CHARS]
    return "\n".join([*lines, head] if head else lines)
