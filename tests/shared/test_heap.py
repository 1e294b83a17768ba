"""Freezing the startup heap, as every service process does once it is built."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from shuttle.heap import freeze_startup_heap
from shuttle.settings import Settings


class Node:
    """An object that only a collection frees once it points at itself."""

    def __init__(self) -> None:
        self.itself = self


@pytest.fixture(autouse=True)
def collector_paused() -> Iterator[None]:
    gc.unfreeze()
    gc.disable()  # no collection of its own between the test's steps
    yield
    gc.enable()
    gc.unfreeze()  # the test process keeps collecting as usual


def test_the_startup_heap_leaves_later_collections_and_its_garbage_is_freed() -> None:
    built = [Node() for _ in range(1000)]
    garbage = weakref.ref(Node())
    assert garbage() is not None

    freeze_startup_heap(Settings().gc_freeze)

    assert garbage() is None  # collected first, not kept for ever
    assert gc.get_freeze_count() >= len(built)
    assert built[0] not in gc.get_objects()  # what collections walk


def test_switched_off_the_collector_sees_everything() -> None:
    garbage = weakref.ref(Node())
    freeze_startup_heap(Settings(gc_freeze=False).gc_freeze)
    assert gc.get_freeze_count() == 0
    assert garbage() is not None
