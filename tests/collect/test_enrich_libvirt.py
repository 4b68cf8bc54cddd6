"""The libvirt enricher against a real libvirt connection (libvirt's test driver).

``tests/fixtures/libvirt/kvm-vgpu-timesliced.xml`` defines domains whose UUIDs and mdev hostdevs
are the VMs of the ``kvm-vgpu-timesliced`` scenario (its header lists which vGPU each one holds).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from ci_helpers import optional_binding
from enrich_helpers import wait_for
from export_helpers import samples_by_name
from vgpu_helpers import by_id

from vgpumon.collect import Sampler
from vgpumon.collect.enrich.libvirt import LibvirtConfig, LibvirtEnricher
from vgpumon.errors import ConfigError
from vgpumon.metrics.exposition import render
from vgpumon.model import Snapshot, from_json, to_json
from vgpumon.testing import sim_host

libvirt = optional_binding("libvirt", "libvirt")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "libvirt" / "kvm-vgpu-timesliced.xml"
URI = f"test://{FIXTURE}"


class Link:
    """A real test-driver connection that the test can cut and restore.

    The enricher connects through :meth:`connect`; while the link is down, connecting fails and
    every call on a connection handed out before raises ``libvirtError``, as a libvirtd that died
    does. ``conn`` stays usable by the test to start and stop domains (the test driver reports
    lifecycle events to callbacks of the same connection).
    """

    def __init__(self) -> None:
        self.conn = libvirt.open(URI)
        self.up = True
        self.connects = 0
        self._cut = False

    def cut(self) -> None:
        self.up = False
        self._cut = True

    def connect(self, uri: str) -> Any:
        assert uri == URI
        if not self.up:
            raise libvirt.libvirtError("Failed to connect socket: Connection refused")
        if self._cut:  # a libvirtd that came back: a new connection, as after a restart
            self.conn = libvirt.open(URI)
            self._cut = False
        self.connects += 1
        return _Proxy(self)


class _Proxy:
    def __init__(self, link: Link) -> None:
        self._link = link

    def close(self) -> int:
        return 0  # the test's connection outlives the enricher's use of it

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._link.conn, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if not self._link.up:
                raise libvirt.libvirtError("End of file while reading data: Input/output error")
            return target(*args, **kwargs)

        return call


async def _enriched_cycle(host: Any, enricher: LibvirtEnricher, after: int = 1) -> Snapshot:
    await host.cycle()  # starts the enricher
    await asyncio.to_thread(wait_for, lambda: enricher.refreshes >= after, "a libvirt read")
    return await host.cycle()


def _success(snap: Snapshot) -> bool | None:
    return next((c.success for c in snap.collectors if c.name == "libvirt"), None)


@pytest.fixture
def host() -> Any:
    h = sim_host("kvm-vgpu-timesliced")
    yield h
    h.close()


async def test_names_reach_the_snapshot_the_json_and_the_exposition(host: Any) -> None:
    enricher = LibvirtEnricher(LibvirtConfig(uri=URI))
    host.sampler.enrichers = [enricher]
    snap = await _enriched_cycle(host, enricher)

    gpu0, gpu1, gpu2 = snap.gpus
    render07 = by_id(gpu0)[1]
    assert render07.vm is not None
    assert (render07.vm.name, render07.vm.state) == ("vm-render-07", "running")
    assert render07.vm.uuid == render07.vm_id
    assert render07.vm.title == "Render node 7"
    assert render07.vm.description == "Blender farm, team visual"
    assert render07.vf_pci_bus_id == "0000:18:00.4"  # the mdev's parent node device is a VF
    assert by_id(gpu0)[2].vm.name == "ml-train-02"  # by VM UUID alone
    assert by_id(gpu0)[2].vf_pci_bus_id is None
    assert by_id(gpu0)[3].vm.name == "vdi-desk-03"
    assert by_id(gpu0)[4].vm is None  # libvirt does not know this VM
    assert by_id(gpu1)[11].vm.name == "cad-ws-11"
    assert by_id(gpu1)[11].vf_pci_bus_id == "0000:2a:00.4"  # a VF of GPU 1 as a PCI hostdev
    assert by_id(gpu2)[22].vm.state == "shutoff"
    assert _success(snap) is True

    again = from_json(to_json(snap))
    assert again == snap
    assert "vm-render-07" in to_json(snap)

    text = render(snap).decode()
    info = {s[0]["vgpu_id"]: s[0] for s in samples_by_name(text)["vgpumon_vgpu_info"]}
    assert info["1"]["vm_name"] == "vm-render-07"
    assert info["1"]["vm_uuid"] == "6f1c2a7e-93d4-4b7a-8f1e-0c5d9e2b4a11"
    assert info["1"]["vm_title"] == "Render node 7"
    assert info["1"]["vf_pci_bus_id"] == "0000:18:00.4"
    assert info["4"]["vm_name"] == ""
    states = samples_by_name(text)["vgpumon_vgpu_vm_state"]
    assert ({"gpu": "2", "vgpu_id": "22", "state": "shutoff"}, 1.0) in [
        ({k: labels[k] for k in ("gpu", "vgpu_id", "state")}, v) for labels, v in states
    ]
    # Names only in the info family: value series keep the labels they had.
    assert "vm_name" not in text.split("vgpumon_vgpu_utilization_ratio{", 1)[1].split("}")[0]
    assert 'vgpumon_scrape_collector_success{collector="libvirt"} 1.0' in text

    # The enricher's own connection is read-only: libvirt refuses to change a domain through it.
    with pytest.raises(libvirt.libvirtError, match="read only"):
        enricher._conn.lookupByName("vm-render-07").destroy()


async def test_domain_start_and_stop_are_followed_by_events(host: Any) -> None:
    link = Link()
    # No periodic re-read during the test: only lifecycle events can bring the changes in.
    config = LibvirtConfig(uri=URI, resync_seconds=3600)
    enricher = LibvirtEnricher(config, connect=link.connect)
    host.sampler.enrichers = [enricher]
    snap = await _enriched_cycle(host, enricher)
    assert by_id(snap.gpus[0])[1].vm.state == "running"
    assert by_id(snap.gpus[2])[22].vm.state == "shutoff"

    link.conn.lookupByName("vm-render-07").destroy()
    link.conn.lookupByName("spare-22").create()
    # A domain defined and started while vgpumon runs (vGPU 12's VM): named without a resync.
    link.conn.createXML(
        "<domain type='test'><name>late-12</name>"
        "<uuid>8218c946-8c03-3d65-abd6-83c388280040</uuid><memory>1048576</memory>"
        "<vcpu>1</vcpu><os><type>hvm</type></os></domain>"
    )
    await asyncio.to_thread(
        wait_for,
        lambda: (
            {d.name: d.state for d in enricher.inventory.domains}
            == {
                **{d.name: d.state for d in enricher.inventory.domains},
                "vm-render-07": "shutoff",
                "spare-22": "running",
            }
        ),
        "the lifecycle events to be read",
    )
    await asyncio.to_thread(
        wait_for,
        lambda: any(d.name == "late-12" for d in enricher.inventory.domains),
        "the new domain to be read",
    )
    snap = await host.cycle()
    assert by_id(snap.gpus[0])[1].vm.state == "shutoff"
    assert by_id(snap.gpus[2])[22].vm.state == "running"
    assert by_id(snap.gpus[1])[12].vm.name == "late-12"
    assert enricher.events >= 2
    assert link.connects == 1


async def test_a_connection_lost_mid_run_is_survived_and_reported(host: Any) -> None:
    link = Link()
    config = LibvirtConfig(uri=URI, retry_seconds=0.05)
    enricher = LibvirtEnricher(config, connect=link.connect)
    host.sampler.enrichers = [enricher]
    snap = await _enriched_cycle(host, enricher)
    assert _success(snap) is True

    link.cut()
    enricher._refresher.wake()  # what libvirt's close callback does when libvirtd goes away
    await asyncio.to_thread(wait_for, lambda: enricher.status() is False, "the failure")
    snap = await host.cycle()
    assert _success(snap) is False
    gpu0 = snap.gpus[0]
    assert gpu0.up and len(gpu0.vgpu_instances) == 4  # vGPU data keeps flowing
    assert by_id(gpu0)[1].utilization.sm is not None
    assert by_id(gpu0)[1].vm.name == "vm-render-07"  # the last names stay
    text = render(snap).decode()
    assert 'vgpumon_scrape_collector_success{collector="libvirt"} 0.0' in text
    assert "vgpumon_vgpu_utilization_ratio{" in text

    link.up = True
    await asyncio.to_thread(wait_for, lambda: enricher.status() is True, "the reconnection")
    snap = await host.cycle()
    assert _success(snap) is True
    assert link.connects >= 2


async def test_unreachable_libvirt_from_the_start(host: Any, tmp_path: Path) -> None:
    uri = f"qemu+unix:///system?socket={tmp_path}/no-libvirtd.sock"
    enricher = LibvirtEnricher(LibvirtConfig(uri=uri, retry_seconds=0.05))
    host.sampler.enrichers = [enricher]
    await host.cycle()
    await asyncio.to_thread(wait_for, lambda: enricher.status() is False, "the failure")
    snap = await host.cycle()
    assert _success(snap) is False
    assert all(v.vm is None for g in snap.gpus for v in g.vgpu_instances)
    assert sum(len(g.vgpu_instances) for g in snap.gpus) == 11
    assert "no-libvirtd.sock" in (enricher._refresher.error or "")


async def test_no_series_before_the_first_read(host: Any) -> None:
    enricher = LibvirtEnricher(LibvirtConfig(uri=URI))
    host.sampler.enrichers = [enricher]
    snap = host.sampler._enrich(host.sampler._cycle())  # not started: nothing read yet
    assert _success(snap) is None
    assert 'vm_name="vm-' not in render(snap).decode()


def test_missing_binding_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "libvirt", None)
    with pytest.raises(ConfigError, match=r"install the \[libvirt\] extra: .* -m pip install "):
        LibvirtEnricher(LibvirtConfig(uri=URI))


def test_enricher_closes_with_the_sampler(host: Any) -> None:
    enricher = LibvirtEnricher(LibvirtConfig(uri=URI))
    host.sampler.enrichers = [enricher]
    enricher.start()
    wait_for(lambda: enricher.refreshes >= 1, "a libvirt read")
    host.sampler.close()
    assert enricher._conn is None
    assert dataclasses.is_dataclass(enricher.inventory)


async def test_this_hosts_feed_carries_the_names() -> None:
    """What ``top`` on this host reads: the same enrichers in the in-process sampler."""
    from vgpumon.nvml.loader import open_session
    from vgpumon.sources.fleet import this_host

    enricher = LibvirtEnricher(LibvirtConfig(uri=URI))
    sampler = Sampler(open_session(sim="kvm-vgpu-timesliced"), enrichers=[enricher])
    feed = this_host(sampler)
    try:
        await sampler.cycle()
        await asyncio.to_thread(wait_for, lambda: enricher.refreshes >= 1, "a libvirt read")
        await sampler.cycle()
    finally:
        sampler.close()
    update = feed.latest.hosts[0]
    assert update.snapshot is not None
    assert by_id(update.snapshot.gpus[0])[1].vm.name == "vm-render-07"
