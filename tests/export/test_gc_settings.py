"""Once up, the exporter moves its start-up objects out of the collector's full passes."""

from __future__ import annotations

import gc

from vgpumon.export.gc_settings import settle_after_startup


def test_start_up_objects_are_frozen_and_later_ones_are_not() -> None:
    try:
        frozen = settle_after_startup()
        assert frozen > 1000  # every module and function loaded so far
        # The count can only fall afterwards: a frozen object freed by reference counting (another
        # test's thread finishing, a cache dropping an entry) leaves the permanent generation.
        assert gc.get_freeze_count() <= frozen
        later = [object() for _ in range(3)], [[]]
        tracked = {id(o) for o in gc.get_objects()}
        assert id(later[0]) in tracked and id(later[1]) in tracked  # still walked by the collector
        assert gc.get_freeze_count() <= frozen  # nothing made after the freeze was frozen
    finally:
        gc.unfreeze()  # leave the test process as it was
