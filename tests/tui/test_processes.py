"""Processes on bare-metal and pass-through hosts, as nvitop shows them: user, command line, CPU
and host memory from /proc, GPU memory and SM share from NVML; a signal to a local process only
after a confirmation, and never to a remote or simulated host's pid."""

from __future__ import annotations

import os
import pwd
import signal
from typing import Any

from tui_helpers import plain, settle

from vgpumon.sources.procinfo import ProcInfo, ProcTable
from vgpumon.tui.screens.signal import ConfirmSignal
from vgpumon.tui.widgets.keyed_table import KeyedTable


def test_proc_table_reads_user_command_cpu_and_memory_of_this_process() -> None:
    table = ProcTable()
    first = table.read([os.getpid(), 2**22 + 12345])  # the second pid does not exist
    me = first[os.getpid()]
    assert list(first) == [os.getpid()]
    assert me.user == pwd.getpwuid(os.getuid()).pw_name
    assert me.command is not None and "python" in me.command.lower()
    assert me.rss_bytes is not None and me.rss_bytes > 1 << 20
    assert me.cpu is None  # one read: no CPU share yet
    sum(i * i for i in range(200_000))  # some CPU time between the reads
    assert table.read([os.getpid()])[os.getpid()].cpu is not None


async def test_a_simulated_hosts_pids_get_no_signal(sim_host: Any) -> None:
    host = sim_host("baremetal-8xh100")
    app = host.app()
    sent: list[tuple[int, int]] = []
    app.send_signal = lambda pid, sig: sent.append((pid, sig))
    async with app.run_test(size=(120, 40)) as pilot:
        await host.at(0)
        await settle(pilot)
        assert app.proc_table is None  # simulated: its pids name nothing on this machine
        app.screen.query_one("#holders", KeyedTable).focus()
        await pilot.press("K")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmSignal) and not sent


async def test_a_local_process_is_signalled_only_after_confirming(sim_host: Any) -> None:
    host = sim_host("baremetal-8xh100")
    app = host.app()
    sent: list[tuple[int, int]] = []
    app.send_signal = lambda pid, sig: sent.append((pid, sig))
    # Stand-ins for this host's /proc: every pid is alice's training job.
    app.proc_table = ProcTable()
    app.local_processes = lambda pids: {  # type: ignore[method-assign]
        p: ProcInfo("alice", "python3 train.py --epochs 90", 0.5, 3 << 30) for p in pids
    }
    async with app.run_test(size=(120, 40)) as pilot:
        await host.at(0)
        await settle(pilot)
        holders = app.screen.query_one("#holders", KeyedTable)
        first = holders.held_keys[0]
        cells = plain(holders.cells(first))
        assert "alice" in cells and "50%" in cells  # user and CPU beside GPU memory and SM
        holders.focus()
        await pilot.press("K")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmSignal)
        pid = app.screen.pid
        assert f"/pid/{pid}/" in first
        await pilot.press("n")  # cancelled: nothing sent
        await settle(pilot)
        assert not sent and not isinstance(app.screen, ConfirmSignal)
        await pilot.press("K")
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        assert sent == [(pid, signal.SIGTERM)]
        await pilot.press("slash")
        await pilot.press(*"user:bob", "enter")
        await settle(pilot)
        assert holders.held_keys == []  # a filter by user
