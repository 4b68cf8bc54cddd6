"""``vgpumon top --ssh.targets`` on an ESXi vGPU host whose vGPU report is missing: the VMs of its
process list are shown as VMs, by name with the framebuffer each holds, not as nameless processes
(tests/fixtures/smi: a report written by hand, VM names padded with spaces, world IDs as pids)."""

from __future__ import annotations

from pathlib import Path

from tui_helpers import plain, settle, until

from vgpumon.smi import ReportFailure
from vgpumon.sources.ssh import SshFleet
from vgpumon.sources.ssh_targets import SshSettings, SshTarget
from vgpumon.tui.app import create_app
from vgpumon.tui.widgets.keyed_table import KeyedTable

DEVICE = (
    Path(__file__).resolve().parents[1] / "fixtures/smi/esxi-vgpu-host-device.xml"
).read_bytes()


async def test_an_esxi_host_s_vms_are_listed_by_name_and_framebuffer() -> None:
    async def fetch(target: SshTarget) -> tuple[bytes, bytes | ReportFailure | None]:
        return DEVICE, b""  # the host printed no vGPU report

    target = SshTarget("esxi-1")
    fleet = SshFleet(SshSettings(targets=(target,), interval_seconds=60), fetch=fetch)
    app = create_app(fleet, start_feed=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await fleet.poll("esxi-1")
        await settle(pilot)
        await until(pilot, lambda: app.screen.query("#holders"))
        await settle(pilot)
        title = app.screen.query_one("#holders-title").render()
        assert "VMs on the GPUs" in str(title)
        table = app.screen.query_one("#holders", KeyedTable)
        rows = [" ".join(plain(table.cells(key))) for key in table.held_keys]
        assert any("render-farm-01" in r and "8.0 GiB" in r for r in rows), rows
        assert any("finance, q3 vdi" in r and "4.0 GiB" in r for r in rows), rows
    fleet.transport.close()
