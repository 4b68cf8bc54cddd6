"""A collector's module carries its name: ``--collector.xid`` is read in ``collect/xid.py``."""

from __future__ import annotations

import importlib

from vgpumon.collect.registry import READER_MODULES


def test_a_module_of_one_collector_is_named_for_it() -> None:
    misnamed = {}
    for module in READER_MODULES:
        names = [reader.name for reader in importlib.import_module(module).READERS]
        if len(names) == 1 and module.rsplit(".", 1)[1] != names[0]:
            misnamed[module] = names[0]
    assert misnamed == {}
