"""How providers word the failures Shuttle answers in its own way: a prompt too long for the
context window, a request feature the server does not offer, an endpoint not reachable.

The feature matchers are kept narrow (each pattern is a server's own wording): a request
refused for any other reason must stay an error, not quietly lose its tools.
"""

from __future__ import annotations

import re

import openai

from shuttle.llm.protocol import Feature

# How providers word "the prompt is too long" (OpenAI, vLLM, llama.cpp, Ollama, Anthropic-compat).
_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|"
    r"prompt is too long|too many tokens|exceeds? the (?:model's )?(?:max|context)|"
    r"exceeds the available context size",
    re.IGNORECASE,
)

_REFUSED: dict[Feature, re.Pattern[str]] = {
    "tools": re.compile(
        # llama.cpp without --jinja (older and newer wording), Ollama for a model whose
        # template has no tools, vLLM without --enable-auto-tool-choice.
        r"tools param requires --jinja|unsupported param: tools\b|"
        r"does not support tools\b|"
        r"\"?auto\"? tool choice requires --enable-auto-tool-choice|"
        r"\b(?:tools|tool calling|function calling) (?:is|are) not supported",
        re.IGNORECASE,
    ),
    "response_format": re.compile(
        # OpenAI for models without JSON mode; servers that reject the parameter by name.
        r"'?response_format'? of type '?json_object'? is not supported|"
        r"unsupported param: response_format\b|"
        r"\bresponse_format (?:is|are) not supported",
        re.IGNORECASE,
    ),
}
ALL_FEATURES: frozenset[Feature] = frozenset(_REFUSED)
_REFUSAL_STATUSES = (400, 422, 500, 501)
"""llama.cpp answers its refusals with 500."""


def is_context_overflow(exc: BaseException) -> bool:
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 413, 422):
        return False
    code = getattr(exc, "code", None)
    return code == "context_length_exceeded" or bool(_OVERFLOW.search(str(exc)))


def refused_feature(exc: BaseException, sent: frozenset[Feature]) -> Feature | None:
    """The feature among those `sent` that the endpoint refused, if that is what `exc` says."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in _REFUSAL_STATUSES:
        return None
    text = str(exc)
    return next((f for f in sorted(sent) if _REFUSED[f].search(text)), None)


def connection_failure(exc: BaseException) -> OSError | None:
    """The socket error under a failed call (refused, reset, unknown host), if that is what
    failed. The SDK says only "Connection error.", and on aiohttp a refused connection even
    comes back as "Request timed out."."""
    if not isinstance(exc, openai.APIConnectionError):
        return None
    found: OSError | None = None
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            found = cause  # the innermost wins: the system's own words
        cause = cause.__cause__ or cause.__context__
    return found
