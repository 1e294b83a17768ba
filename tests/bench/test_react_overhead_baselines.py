"""`bench.suites.react_overhead` with several checkouts side by side: each is a side named
after its folder, and the checkouts compared take the first place of a round in turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.suites.react_overhead import round_order
from bench.support.stack import baseline_names


def test_one_checkout_is_the_baseline_side() -> None:
    assert baseline_names([Path("/work/before")]) == {"baseline": Path("/work/before")}


def test_several_checkouts_are_named_after_their_folders(tmp_path: Path) -> None:
    before, without = tmp_path / "before", tmp_path / "without-ledger"
    assert baseline_names([before, without]) == {
        "baseline:before": before,
        "baseline:without-ledger": without,
    }


def test_checkouts_in_folders_of_one_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="folders of different names"):
        baseline_names([tmp_path / "a" / "tree", tmp_path / "b" / "tree"])


def test_the_checkouts_compared_take_the_first_place_in_turn() -> None:
    sides = ["baseline:a", "baseline:b", "shuttle", "hops", "bare"]
    compared = ["baseline:a", "baseline:b", "shuttle"]
    orders = [round_order(sides, compared, n) for n in range(4)]
    assert [order[0] for order in orders] == ["baseline:a", "baseline:b", "shuttle", "baseline:a"]
    for order in orders:
        assert sorted(order) == sorted(sides)
        assert order[3:] == ["hops", "bare"]


def test_without_checkouts_shuttle_goes_first_every_round() -> None:
    sides = ["shuttle", "shuttle_log", "hops"]
    assert {tuple(round_order(sides, ["shuttle"], n)) for n in range(3)} == {tuple(sides)}
