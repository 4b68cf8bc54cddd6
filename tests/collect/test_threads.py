"""The sampler's threads carry their names into the kernel (``top -H``, per-thread CPU splits)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from vgpumon.collect.threads import daemon_thread, kernel_name
from vgpumon.collect.workers import Worker


def test_kernel_name_drops_the_prefix_and_fits_fifteen_bytes() -> None:
    assert kernel_name("vgpumon-gpu3") == "gpu3"
    assert kernel_name("vgpumon-schedlog-GPU-1a2b3c4d5e") == "schedlog-GPU-1a"
    assert kernel_name("vgpumon-") == "vgpumon-"
    assert len(kernel_name("vgpumon-" + "é" * 40).encode()) == 15


def _comm(thread: threading.Thread) -> str:
    assert thread.native_id is not None
    return Path(f"/proc/self/task/{thread.native_id}/comm").read_text().strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")
def test_a_daemon_thread_names_itself_in_the_kernel_before_its_target_runs() -> None:
    seen: list[str] = []

    def target(arg: int) -> None:
        seen.append(_comm(threading.current_thread()) + f":{arg}")

    thread = daemon_thread(target, "vgpumon-xid", (7,))
    assert thread.daemon and thread.name == "vgpumon-xid"
    thread.start()
    thread.join(5)
    assert seen == ["xid:7"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/task is Linux's")
def test_a_gpu_worker_thread_is_named_for_its_gpu() -> None:
    worker = Worker("gpu5")
    done = threading.Event()
    names: list[str] = []

    def job() -> None:
        names.append(_comm(threading.current_thread()))
        done.set()

    worker.post(job, lambda result, exc: None)
    assert done.wait(5)
    worker.stop()
    assert names == ["gpu5"]
