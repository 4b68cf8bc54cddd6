"""VM names for vGPUs, from libvirt (KVM hosts).

The enricher keeps one **read-only** connection (``qemu:///system`` unless configured) and reads
every domain's XML, state and the mdev / PCI node devices into an
:class:`~vgpumon.collect.enrich.domains.Inventory` on its own thread. It reads again

* at once when libvirt reports a domain lifecycle event (started, stopped, defined, migrated...),
  through libvirt's default event loop, which runs on one daemon thread for the whole process;
* every ``resync_seconds`` in any case (events can be missed while reconnecting);
* every ``retry_seconds`` while libvirt cannot be reached, reconnecting each time.

When libvirt goes away the last inventory stays in use (the VMs keep running without libvirtd) and
``vgpumon_scrape_collector_success{collector="libvirt"}`` is 0 until a read works again; the
vGPU data itself never depends on libvirt.

The binding is the optional ``libvirt`` extra (``libvirt-python``); it is imported only when the
enricher is configured.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vgpumon.collect.enrich import DEFAULT_LIBVIRT_URI, LIBVIRT
from vgpumon.collect.enrich.base import Refresher
from vgpumon.collect.enrich.domains import (
    Domain,
    Inventory,
    parse_domain,
    parse_node_device,
    state_name,
)
from vgpumon.collect.threads import daemon_thread
from vgpumon.collect.vanished import DepartureTracker, with_vms
from vgpumon.errors import ConfigError
from vgpumon.install_hints import install_hint
from vgpumon.model import Snapshot

log = logging.getLogger(__name__)

NAME = LIBVIRT
DEFAULT_URI = DEFAULT_LIBVIRT_URI


@dataclass(frozen=True)
class LibvirtConfig:
    uri: str = DEFAULT_URI
    resync_seconds: float = 300.0  # full re-read even without events
    timeout_seconds: float = 10.0  # a read running longer than this reports failure
    retry_seconds: float = 5.0  # reconnect period while libvirt is unreachable


def binding() -> Any:
    """The ``libvirt`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        return importlib.import_module("libvirt")
    except ImportError as exc:
        raise ConfigError(
            "libvirt enrichment needs the libvirt Python binding: "
            f"{install_hint('libvirt')} (or the distribution's python3-libvirt)"
        ) from exc


_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop(lv: Any) -> None:
    """Start libvirt's default event loop once per process (events and keepalives need it).

    It must be registered before a connection is opened; it cannot be stopped, so it runs on a
    daemon thread that ends with the process.
    """
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        # Failures arrive as exceptions; the default handler would also print each one (an
        # unreachable libvirtd every few seconds) to stderr.
        lv.registerErrorHandler(lambda _ctx, _err: None, None)
        lv.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                try:
                    lv.virEventRunDefaultImpl()
                except Exception:  # keep the loop alive; a broken iteration must not end events
                    log.debug("libvirt event loop iteration failed", exc_info=True)
                    time.sleep(1.0)

        daemon_thread(run, "vgpumon-libvirt-events").start()
        _loop_started = True


def read_inventory(lv: Any, conn: Any) -> Inventory:
    """One full read: every domain (XML, state, id) and the mdev / VF node devices."""
    domains: list[Domain] = []
    for dom in conn.listAllDomains(0):
        try:
            state = dom.state()[0]
            domain_id = dom.ID()
            xml = dom.XMLDesc(0)
        except lv.libvirtError as exc:
            if exc.get_error_code() == lv.VIR_ERR_NO_DOMAIN:
                continue  # undefined between the listing and the read
            raise
        domains.append(parse_domain(xml, state=state_name(state), domain_id=domain_id))
    mdev_parents: dict[str, str] = {}
    for xml in _node_devices(lv, conn):
        mdev, parent, _ = parse_node_device(xml)
        if mdev is not None and parent is not None:
            mdev_parents[mdev] = parent
    # Only the PCI devices that can be a vGPU's VF: parents of mdevs and domains' PCI hostdevs
    # (listing every PCI device of a large host on each lifecycle event would cost far more).
    candidates = set(mdev_parents.values()) | {a for d in domains for a in d.pci_addresses}
    physfn: dict[str, str] = {}
    for address in sorted(candidates):
        xml = _node_device(lv, conn, "pci_" + address.replace(":", "_").replace(".", "_"))
        if xml is not None:
            _, vf, pf = parse_node_device(xml)
            if vf is not None and pf is not None:
                physfn[vf] = pf
    return Inventory.build(domains, mdev_parents, physfn)


def _node_devices(lv: Any, conn: Any) -> list[str]:
    """XML of every mdev node device; none where the driver has no node devices."""
    try:
        devices = conn.listAllDevices(lv.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV)
    except lv.libvirtError as exc:
        if exc.get_error_code() != lv.VIR_ERR_NO_SUPPORT:
            raise
        return []  # names still come from the domains
    out = []
    for dev in devices:
        try:
            out.append(dev.XMLDesc(0))
        except lv.libvirtError as exc:
            if exc.get_error_code() != lv.VIR_ERR_NO_NODE_DEVICE:  # removed meanwhile
                raise
    return out


def _node_device(lv: Any, conn: Any, name: str) -> str | None:
    """One node device's XML, None when there is no such device (or no node devices)."""
    try:
        return str(conn.nodeDeviceLookupByName(name).XMLDesc(0))
    except lv.libvirtError as exc:
        if exc.get_error_code() in (lv.VIR_ERR_NO_NODE_DEVICE, lv.VIR_ERR_NO_SUPPORT):
            return None
        raise


class LibvirtEnricher:
    """Names the VM of each vGPU; see the module docstring."""

    name = NAME

    def __init__(
        self, config: LibvirtConfig | None = None, *, connect: Callable[[str], Any] | None = None
    ) -> None:
        self.config = config or LibvirtConfig()
        self._lv = binding()
        self._connect = connect or self._lv.openReadOnly
        self._conn: Any = None
        self._callback: int | None = None
        self._lost = threading.Event()
        self.events = 0  # lifecycle events received, for tests and debugging
        self._departures = DepartureTracker()
        self._refresher: Refresher[Inventory] = Refresher(
            NAME,
            self._fetch,
            interval=self.config.resync_seconds,
            timeout=self.config.timeout_seconds,
            retry=self.config.retry_seconds,
        )

    # ------------------------------------------------------------------ Enricher

    def start(self) -> None:
        self._refresher.start()

    def apply(self, snapshot: Snapshot) -> Snapshot:
        # The VMs' names merged in, and whether a vGPU that went away left with its VM
        # (vgpumon.collect.vanished).
        return with_vms(snapshot, self._refresher.result, self._departures)

    def status(self) -> bool | None:
        return self._refresher.ok()

    def close(self) -> None:
        self._refresher.stop()
        # Closing a connection another thread is calling through is not safe in libvirt; a read
        # still running (a hung libvirtd) keeps its connection until the process ends.
        if not self._refresher.busy:
            self._drop()

    def settled(self) -> bool:
        return self._refresher.settled()

    @property
    def refreshes(self) -> int:
        return self._refresher.refreshes

    @property
    def inventory(self) -> Inventory | None:
        return self._refresher.result

    # ------------------------------------------------------------------ the enricher's thread

    def _fetch(self) -> Inventory:
        if self._lost.is_set():
            self._drop()
        conn = self._open()
        try:
            return read_inventory(self._lv, conn)
        except self._lv.libvirtError:
            self._drop()  # the next attempt reconnects
            raise

    def _open(self) -> Any:
        if self._conn is not None:
            return self._conn
        ensure_event_loop(self._lv)
        conn = self._connect(self.config.uri)
        if conn is None:  # old bindings return None instead of raising
            raise self._lv.libvirtError(f"cannot connect to {self.config.uri}")
        self._lost.clear()
        self._conn = conn
        try:
            self._watch(conn)
        except Exception:
            self._drop()
            raise
        log.info("libvirt enricher connected to %s", self.config.uri)
        return conn

    def _watch(self, conn: Any) -> None:
        """Ask for lifecycle events and for word of the connection closing."""
        # A dead remote libvirtd then closes the connection instead of hanging it; local
        # drivers have no keepalive.
        with contextlib.suppress(self._lv.libvirtError):
            conn.setKeepAlive(5, 3)
        # Drivers without close callbacks: a lost connection shows as an error of the next read.
        with contextlib.suppress(self._lv.libvirtError):
            conn.registerCloseCallback(self._on_close, None)
        self._callback = conn.domainEventRegisterAny(
            None, self._lv.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
        )

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        callback, self._callback = self._callback, None
        if conn is None:
            return
        for undo in (
            lambda: conn.domainEventDeregisterAny(callback) if callback is not None else None,
            conn.unregisterCloseCallback,
            conn.close,
        ):
            try:
                undo()
            except Exception:  # a dead connection fails to be taken down too
                log.debug("dropping the libvirt connection", exc_info=True)

    # ------------------------------------------------------------------ libvirt's event thread

    def _on_lifecycle(self, conn: Any, dom: Any, event: int, detail: int, opaque: Any) -> None:
        self.events += 1
        self._refresher.wake()

    def _on_close(self, conn: Any, reason: int, opaque: Any) -> None:
        self._lost.set()
        self._refresher.wake()
