"""Without Redis, one events replica per PostgreSQL database: a second one refuses to start
rather than serve streams that would never see the first one's appends."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.events_process import EventsProcess

pytestmark = pytest.mark.integration


def test_a_second_replica_without_redis_refuses_until_the_first_is_gone(
    postgres_url: str, tmp_path: Path
) -> None:
    variables = {"SHUTTLE_DATABASE_URL": postgres_url}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = EventsProcess(tmp_path / "a", variables).start()
    second = EventsProcess(tmp_path / "b", variables)
    try:
        with pytest.raises(RuntimeError, match="exited before serving"):
            second.start()
        refusal = (tmp_path / "b" / "events-1.log").read_text()
        assert "another events replica is running on this database without Redis" in refusal
        assert "SHUTTLE_REDIS_URL" in refusal
        first.kill()  # its lock goes with its connection
        second.start()
        second.stop()  # a clean stop gives the lock back
        first.start()
    finally:
        first.stop()
        second.stop()
