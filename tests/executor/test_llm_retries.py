"""A run shows each LLM retry on its log: ERROR_OCCURRED (recoverable), then ERROR_RECOVERY."""

from __future__ import annotations

from shuttle.llm.openai_model import OpenAIModel
from tests.executor.conftest import Backends, types_of
from tests.support.scripted_openai import ScriptedOpenAI, error, text


async def test_a_rate_limited_call_is_retried_and_the_run_says_so(
    backends: Backends, model: ScriptedOpenAI
) -> None:
    model.script(
        error(429, "rate limited", headers={"retry-after-ms": "20"}),
        error(500, "overloaded"),
        text("Hello there."),
        text("Hello there."),
    )
    llm = OpenAIModel(model.base_url, "k", "scripted-model", 10.0, 3, retry_base_seconds=0.001)
    events = await backends.run_to_end(backends.run_manager(llm), "Say hello")

    kinds = types_of(events)
    assert kinds[-3:] == ["AGENT_COMPLETED", "WORKFLOW_COMPLETED", "STREAM_END"]
    errors = [e for e in events if e["type"] in ("ERROR_OCCURRED", "ERROR_RECOVERY")]
    assert [e["type"] for e in errors] == [
        "ERROR_OCCURRED",
        "ERROR_RECOVERY",
        "ERROR_OCCURRED",
        "ERROR_RECOVERY",
    ]
    rate_limited, first_recovery, failed_again, recovered = (e["payload"] for e in errors)
    assert rate_limited["error_type"] == "RATE_LIMIT"
    assert rate_limited["recoverable"] is True and rate_limited["fatal"] is False
    assert (rate_limited["retry_count"], rate_limited["max_retries"]) == (1, 3)
    assert rate_limited["retry_after"] == 0.02
    assert first_recovery | {"model": ""} == {
        "error_type": "RATE_LIMIT",
        "recovery_action": "retry",
        "attempt": 2,
        "max_attempts": 4,
        "success": False,
        "model": "",
    }
    assert failed_again["error_type"] == "LLM_ERROR" and failed_again["retry_count"] == 2
    assert recovered["attempt"] == 3 and recovered["success"] is True
    # The retries happen inside the first LLM call: before its LLM_OUTPUT.
    assert kinds.index("ERROR_RECOVERY") < kinds.index("LLM_OUTPUT")
    assert all(e["agent_id"] == "agent-main" for e in errors)
