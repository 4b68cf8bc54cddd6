"""``vgpumon snapshot``'s tables at 80 columns: nothing wider than the terminal, and no number,
size or UUID broken across lines, for every built-in scenario."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from view_helpers import HANG_FREE, snapshot_of

from vgpumon.view.render import snapshot_renderable

# Values that must stay whole: UUIDs, sizes, percentages, watts, degrees, clocks.
WHOLE = re.compile(
    r"(?:GPU|MIG)-[0-9a-f-]{36}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\d+(?:\.\d+)?/\d+(?:\.\d+)? [GM]iB|\d+(?:\.\d+)?%|\d+/\d+ W|\d+ °C"
)


def picture(scenario: str, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(snapshot_renderable(snapshot_of(scenario), width))
    return console.export_text()


def expected_values(scenario: str) -> set[str]:
    return set(WHOLE.findall(picture(scenario, 400)))


@pytest.mark.parametrize("scenario", HANG_FREE)
def test_80_columns_fit_and_keep_values_whole(scenario: str) -> None:
    text = picture(scenario, 80)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    snap = snapshot_of(scenario)
    for gpu in snap.gpus:
        assert gpu.uuid in text  # on one line
        for v in gpu.vgpu_instances:
            if v.vm_id:
                assert v.vm_id in text
    # No line ends in the first part of a value (the rest folded onto the next line).
    values = expected_values(scenario)
    for line in lines:
        cut = line.rstrip()
        for value in values:
            for k in range(3, len(value)):
                head = value[:k]
                if cut.endswith(head) and any(ch in "/- " for ch in head):
                    rest = value[k:]
                    assert not rest.strip() or cut.endswith(value), (value, line)


def test_absent_values_print_as_a_dash() -> None:
    text = picture("a100-mig-mixed", 80)
    mig_line = next(line for line in text.splitlines() if line.lstrip().startswith("0  MIG"))
    assert "—" in mig_line  # no whole-GPU utilization in MIG mode
