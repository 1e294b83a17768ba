"""The web console end to end in headless Chromium, with a screenshot kept as an artefact."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.gateway.conftest import AuthStack, drive

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).parents[2] / "var" / "test-artifacts"


def test_console_is_served_without_any_cdn(auth_stack: AuthStack) -> None:
    page = httpx.get(f"{auth_stack.url}/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
    for asset in re.findall(r"(?:src|href)=\"(/static/[^\"]+)\"", page.text):
        assert httpx.get(f"{auth_stack.url}{asset}").status_code == 200, asset


def test_console_runs_and_replays_a_task(auth_stack: AuthStack, browser_tools: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "console.png"
    shot.unlink(missing_ok=True)
    result = drive("console", auth_stack.url, auth_stack.key_a, str(shot))
    assert result.get("pageErrors") is None
    assert result["cdnScripts"] == []
    assert "calculator" in result["toolSummary"]
    assert (result["toolOpenBefore"], result["toolOpenAfter"]) == (False, True)
    assert '"expression": "12*7"' in result["toolArgs"]
    assert result["toolObservation"] == "84"
    assert result["answerHtml"] == "<p>[demo model] 12*7 = 84</p>"
    assert re.match(
        r"\d+ tokens \(\d+ in, \d+ out\) · \$0\.000000 · [\d.]+ s · 1 tool calls", result["usage"]
    )
    assert result["hash"] == "#" + result["workflowId"]
    # The task has finished, so control is refused: the console shows the service's own words.
    assert result["pauseToast"] == "409: workflow is completed; it cannot be paused"
    assert "409: Interrupt refused: workflow is completed" in result["interruptToast"]
    assert result["tasksListed"] >= 1
    assert result["answerAfterReload"] == "[demo model] 12*7 = 84"
    assert result["toolsAfterReload"] == 1
    # The conversation listed first is the one just run; continuing it adds a turn.
    assert result["sessionTurns"] == ["What is 12*7?", "What is 2*3?"]
    assert shot.stat().st_size > 10_000
