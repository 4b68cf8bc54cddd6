"""libvirt's view of a KVM host as plain data, and which domain holds which vGPU.

Parsing and matching are kept apart from the connection (:mod:`vgpumon.collect.enrich.libvirt`)
so they can be tested on XML text alone and so that :func:`merge` (run at the end of every cycle)
does nothing but dictionary look-ups.

How a vGPU is tied to its domain, most specific first:

1. its **mdev UUID** is the ``<source><address uuid=.../>`` of one of the domain's
   ``<hostdev type='mdev'>`` devices (KVM, mediated devices);
2. its **VM id** as NVML gives it: the domain UUID (``vm_id_type`` ``uuid``, what QEMU passes to
   the guest as ``-uuid``) or the running domain's numeric id (``domain_id``).

For SR-IOV vGPUs (Ampere and later) the virtual function the vGPU sits on is the parent PCI device
of its mdev node device, when that device is a VF (it has a ``phys_function``); on hosts that hand
VFs to guests directly (no mdev) it is the domain's ``<hostdev type='pci'>`` that is a VF of the
vGPU's own GPU, when there is exactly one.
"""

from __future__ import annotations

import dataclasses
import functools
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from vgpumon.model import VM_STATES, Gpu, Snapshot, VgpuInstance, VirtualMachine


@dataclass(frozen=True)
class Domain:
    """One libvirt domain and the host devices it was given."""

    name: str
    uuid: str  # lower case
    id: int | None = None  # the running domain's number; None when it is not running
    state: str | None = None
    title: str | None = None
    description: str | None = None
    mdev_uuids: tuple[str, ...] = ()  # lower case
    pci_addresses: tuple[str, ...] = ()  # "0000:18:00.4"

    @functools.cached_property
    def vm(self) -> VirtualMachine:
        """The model's view of this domain, built once per read (merged every cycle)."""
        return VirtualMachine(
            name=self.name,
            uuid=self.uuid,
            state=self.state,
            title=self.title,
            description=self.description,
        )


@dataclass(frozen=True)
class Inventory:
    """Everything one full read of libvirt gave, indexed for :func:`merge`."""

    domains: tuple[Domain, ...] = ()
    mdev_parents: dict[str, str] = field(default_factory=dict)  # mdev UUID -> parent PCI address
    physfn: dict[str, str] = field(default_factory=dict)  # VF PCI address -> PF PCI address
    by_mdev: dict[str, Domain] = field(default_factory=dict)
    by_uuid: dict[str, Domain] = field(default_factory=dict)
    by_id: dict[int, Domain] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        domains: list[Domain],
        mdev_parents: dict[str, str] | None = None,
        physfn: dict[str, str] | None = None,
    ) -> Inventory:
        return cls(
            domains=tuple(domains),
            mdev_parents=dict(mdev_parents or {}),
            physfn=dict(physfn or {}),
            by_mdev={m: d for d in domains for m in d.mdev_uuids},
            by_uuid={d.uuid: d for d in domains},
            by_id={d.id: d for d in domains if d.id is not None},
        )


def state_name(code: int) -> str | None:
    """virDomainState number -> :data:`VM_STATES` name."""
    return VM_STATES[code] if 0 <= code < len(VM_STATES) else None


def pci_address(value: str | None) -> str | None:
    """Any PCI address spelling -> ``dddd:bb:ss.f`` lower case (libvirt's and sysfs' form).

    NVML writes an 8-digit domain (``00000000:18:00.0``), libvirt node devices ``pci_0000_18_00_4``
    and domain XML separate hex attributes; all compare equal after this.
    """
    if not value:
        return None
    text = value.strip().lower()
    if text.startswith("pci_"):
        parts = text[4:].split("_")
        if len(parts) != 4:
            return None
        text = f"{parts[0]}:{parts[1]}:{parts[2]}.{parts[3]}"
    try:
        head, function = text.rsplit(".", 1)
        dom, bus, slot = head.split(":") if head.count(":") == 2 else ("0", *head.split(":"))
        return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(slot, 16):02x}.{int(function, 16):x}"
    except ValueError:
        return None


def _address_attrs(address: ET.Element) -> str | None:
    try:
        parts = [int(address.get(k, ""), 0) for k in ("domain", "bus", "slot", "function")]
    except ValueError:
        return None
    return f"{parts[0]:04x}:{parts[1]:02x}:{parts[2]:02x}.{parts[3]:x}"


def _text(root: ET.Element, tag: str) -> str | None:
    el = root.find(tag)
    text = el.text.strip() if el is not None and el.text else ""
    return text or None


def parse_domain(xml: str, *, state: str | None = None, domain_id: int | None = None) -> Domain:
    """A domain from its XML description (``virDomainGetXMLDesc``).

    Raises ``ValueError`` for XML without a name or UUID.
    """
    root = ET.fromstring(xml)
    name, uuid = _text(root, "name"), _text(root, "uuid")
    if name is None or uuid is None:
        raise ValueError("domain XML without a name or UUID")
    mdevs: list[str] = []
    pcis: list[str] = []
    for hostdev in root.iterfind("devices/hostdev"):
        address = hostdev.find("source/address")
        if address is None:
            continue
        if hostdev.get("type") == "mdev" and address.get("uuid"):
            mdevs.append(address.get("uuid", "").lower())
        elif hostdev.get("type") == "pci":
            pci = _address_attrs(address)
            if pci is not None:
                pcis.append(pci)
    return Domain(
        name=name,
        uuid=uuid.lower(),
        id=domain_id if domain_id is not None and domain_id >= 0 else None,
        state=state,
        title=_text(root, "title"),
        description=_text(root, "description"),
        mdev_uuids=tuple(mdevs),
        pci_addresses=tuple(pcis),
    )


def parse_node_device(xml: str) -> tuple[str | None, str | None, str | None]:
    """``(mdev UUID, parent PCI address, None)`` for an mdev node device, or
    ``(None, VF PCI address, PF PCI address)`` for a PCI virtual function, else Nones."""
    root = ET.fromstring(xml)
    mdev = root.find("capability[@type='mdev']")
    if mdev is not None:
        uuid = _text(mdev, "uuid")
        if uuid is None:  # libvirt before 7.3 names the mdev only in the device name
            name = _text(root, "name") or ""
            uuid = name[5:41].replace("_", "-") if name.startswith("mdev_") else None
        return (uuid.lower() if uuid else None), pci_address(_text(root, "parent")), None
    pci = root.find("capability[@type='pci']")
    if pci is not None:
        pf = pci.find("capability[@type='phys_function']/address")
        if pf is not None:
            return None, pci_address(_text(root, "name")), _address_attrs(pf)
    return None, None, None


# --------------------------------------------------------------------------- merging


def _domain_of(v: VgpuInstance, inv: Inventory) -> Domain | None:
    if v.mdev_uuid and v.mdev_uuid.lower() in inv.by_mdev:
        return inv.by_mdev[v.mdev_uuid.lower()]
    if v.vm_id is None:
        return None
    if v.vm_id_type == "domain_id":
        try:
            return inv.by_id.get(int(v.vm_id))
        except ValueError:
            return None
    return inv.by_uuid.get(v.vm_id.strip().lower())


def _vf_of(
    v: VgpuInstance, gpu_pci: str | None, domain: Domain | None, inv: Inventory
) -> str | None:
    if v.mdev_uuid:
        parent = inv.mdev_parents.get(v.mdev_uuid.lower())
        if parent is not None and parent in inv.physfn:
            return parent
    if domain is None or gpu_pci is None:
        return None
    vfs = [a for a in domain.pci_addresses if inv.physfn.get(a) == gpu_pci]
    return vfs[0] if len(vfs) == 1 else None


def _merge_gpu(g: Gpu, inv: Inventory) -> Gpu:
    if not g.vgpu_instances:
        return g
    gpu_pci = pci_address(g.pci_bus_id)
    vgpus = []
    for v in g.vgpu_instances:
        domain = _domain_of(v, inv)
        vm = domain.vm if domain is not None else None
        vf = _vf_of(v, gpu_pci, domain, inv)
        # Replacing a vGPU costs far more than the look-ups: only where there is a name to add.
        if vm is None and vf is None:
            vgpus.append(v)
        else:
            vgpus.append(dataclasses.replace(v, vm=vm, vf_pci_bus_id=vf))
    return dataclasses.replace(g, vgpu_instances=tuple(vgpus))


def merge(snapshot: Snapshot, inv: Inventory) -> Snapshot:
    """The snapshot with each vGPU's domain (and VF) filled in from ``inv``."""
    if not any(g.vgpu_instances for g in snapshot.gpus):
        return snapshot
    return dataclasses.replace(snapshot, gpus=tuple(_merge_gpu(g, inv) for g in snapshot.gpus))
