"""The served process freezes its start-up heap and collects young objects less often."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gateway.server.memory import YOUNG_THRESHOLD, freeze_startup_objects


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_freezes_what_exists_and_raises_only_the_young_threshold() -> None:
    _, middle, old = gc.get_threshold()
    survivor = {"built": "at start-up"}

    freeze_startup_objects()

    assert gc.get_freeze_count() > 0
    assert not gc.is_finalized(survivor)  # frozen objects stay alive and usable
    assert gc.get_threshold() == (YOUNG_THRESHOLD, middle, old)


@pytest.mark.usefixtures("restored_gc")
def test_garbage_made_before_the_freeze_is_collected_not_frozen() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    collected: list[str] = []
    node = Node()
    gc.callbacks.append(lambda phase, info: collected.append(phase))
    try:
        ref = weakref.ref(node)
        del node  # a cycle: only the collector frees it
        freeze_startup_objects()
    finally:
        gc.callbacks.pop()
    assert ref() is None
    assert "stop" in collected
