"""vGPU software licensing, from both sides.

* **Host** (reader ``license``, ``host_vgpu`` GPUs): per vGPU instance, the licensed flag, the state
  enum and the expiry, from ``nvmlVgpuInstanceGetLicenseInfo`` (R510+); on older drivers only the
  deprecated licensed flag (``nvmlVgpuInstanceGetLicenseStatus``). It runs after the ``vgpu`` reader
  and fills the ``license`` of the instances that reader found. DRIVER_NOT_LOADED from it means the
  *guest* driver is not running: the instance simply has no license data, NVML itself is fine.
* **Guest** (reader ``guest``, any GPU that is not a vGPU host): per licensable feature, whether
  it is licensed and enabled, the licensed product and the expiry, from
  ``nvmlDeviceGetGridLicensableFeatures`` (``_v4``). The call succeeds on bare metal and
  pass-through too, with ``isGridLicenseSupported = 0`` and no features (docs/nvml-notes.md §5.3).

Expiry dates are calendar fields without a time zone in the header; vgpumon reads them as UTC.
A date is only turned into a timestamp when its status is VALID; PERMANENT, NOT_APPLICABLE and
NOT_AVAILABLE licenses have no expiry (the metric is absent, not 0). The expiry is the end of the
license's lease, which a healthy guest renews: whether a lease is overdue for renewal is decided
here every cycle (:mod:`vgpumon.collect.leases`, docs/licensing.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, ReadFailed, cadence
from vgpumon.collect.leases import LeaseTracker
from vgpumon.collect.vgpu import is_vgpu_host
from vgpumon.collect.vgpu_raw import GONE, GUEST_DRIVER_ABSENT, as_int, nvml_text
from vgpumon.model import GuestLicenseFeature, VgpuLicense
from vgpumon.nvml.enums import LICENSE_EXPIRY_STATUSES, VGPU_LICENSE_STATES

# License state (0.35 ms a read per GPU on an H100, and one per vGPU): every 10 s by default; a
# vGPU seen for the first time is read at once.
LICENSE = cadence("license", 10.0)

EXPIRY_VALID = 2  # NVML_GRID_LICENSE_EXPIRY_VALID (a 1-tuple in pynvml: compare with the int)
FEATURE_CODES = {0: "unknown", 1: "vgpu", 2: "nvidia_rtx", 3: "gaming", 4: "compute", 5: "vgamedev"}
MAX_FEATURES = 3  # NVML_GRID_LICENSE_FEATURE_MAX_COUNT
HOST_MODES = ("host_vgpu", "host_vsga")
LEASES_KEY = "license_leases"  # the GPU's LeaseTracker


def _leases(ctx: GpuContext) -> LeaseTracker:
    tracker = ctx.state.get(LEASES_KEY)
    if not isinstance(tracker, LeaseTracker):
        tracker = ctx.state[LEASES_KEY] = LeaseTracker()
    return tracker


def _with_lease(tracker: LeaseTracker, key: Any, now: float, lic: VgpuLicense) -> VgpuLicense:
    overdue = tracker.overdue(key, now, lic.licensed, lic.expiry_timestamp_seconds)
    return (
        lic if overdue == lic.renewal_overdue else dataclasses.replace(lic, renewal_overdue=overdue)
    )


def expiry(raw: Any) -> tuple[str | None, float | None]:
    """(status name, Unix seconds) from a ``c_nvml{Grid,Vgpu}LicenseExpiry_t``."""
    if raw is None:
        return None, None
    status = as_int(getattr(raw, "status", None))
    name = LICENSE_EXPIRY_STATUSES.get(status) if status is not None else None
    if status != EXPIRY_VALID:
        return name, None
    try:
        when = dt.datetime(
            int(raw.year),
            int(raw.month),
            int(raw.day),
            int(raw.hour),
            int(raw.min),
            int(raw.sec),
            tzinfo=dt.timezone.utc,
        )
    except (ValueError, TypeError, AttributeError):
        return name, None  # a VALID status with an impossible date: say so without a date
    return name, when.timestamp()


def _state_name(value: int | None) -> str | None:
    if value is None:
        return None
    return VGPU_LICENSE_STATES.get(value, "unknown")


_UNREAD_KEY = "license.unread"  # vGPU ids whose license the last read could not get


class _LicenseUnread(Exception):
    """A vGPU's license calls failed: its license is unknown, not "no license data"."""


def vgpu_license(ctx: GpuContext, vgpu: int) -> VgpuLicense:
    """The license of one vGPU; :class:`_LicenseUnread` (with what is known) when its call
    failed, which a booting guest (no driver: no data) must not be mistaken for."""
    no_data = (*GONE, GUEST_DRIVER_ABSENT)
    got = ctx.attempt("nvmlVgpuInstanceGetLicenseInfo", vgpu, no_data=no_data)
    info = got.value
    if info is None:
        if got.status == "error":
            raise _LicenseUnread(f"nvmlVgpuInstanceGetLicenseInfo: {got.error}")
        if got.status != "absent":
            return VgpuLicense()
        old = ctx.attempt("nvmlVgpuInstanceGetLicenseStatus", vgpu, no_data=no_data)
        if old.status == "error":
            raise _LicenseUnread(f"nvmlVgpuInstanceGetLicenseStatus: {old.error}")
        status = as_int(old.value)
        return VgpuLicense(licensed=bool(status) if status is not None else None)
    status_name, expires = expiry(getattr(info, "licenseExpiry", None))
    licensed = as_int(getattr(info, "isLicensed", None))
    return VgpuLicense(
        licensed=bool(licensed) if licensed is not None else None,
        state=_state_name(as_int(getattr(info, "currentState", None))),
        expiry_status=status_name,
        expiry_timestamp_seconds=expires,
    )


def read_vgpu_license(ctx: GpuContext, out: GpuBuilder) -> None:
    """Cadenced (``SamplerConfig.cadences["license"]``): between reads each vGPU keeps its last
    license; a vGPU not seen before (a VM that just started) is read at once."""
    instances = out.get("vgpu_instances") or ()
    if not instances or not is_vgpu_host(ctx, out):
        return
    known: dict[int, VgpuLicense] = {}
    if not ctx.due(LICENSE) and ctx.previous is not None:
        known = {v.vgpu_id: v.license for v in ctx.previous.vgpu_instances}
    unread: list[str] = []
    # A license the last read could not get is read again next cycle, not held unknown (and
    # the collector successful) until the cadence comes round.
    retry: set[int] = ctx.state.get(_UNREAD_KEY, set())
    failed: set[int] = set()

    def license_of(vgpu: int) -> VgpuLicense:
        held = known.get(vgpu)
        if held is not None and vgpu not in retry:
            return held
        try:
            return vgpu_license(ctx, vgpu)
        except _LicenseUnread as err:
            unread.append(f"vGPU {vgpu}: {err}")
            failed.add(vgpu)
            return VgpuLicense()

    leases = _leases(ctx)
    leases.keep({(inst.vgpu_id, inst.uuid) for inst in instances})
    out.set(
        vgpu_instances=tuple(
            dataclasses.replace(
                inst,
                license=_with_lease(
                    leases, (inst.vgpu_id, inst.uuid), ctx.now, license_of(inst.vgpu_id)
                ),
            )
            for inst in instances
        )
    )
    ctx.state[_UNREAD_KEY] = failed
    if unread:
        # Licenses this cycle could not read: the collector did not succeed, so whoever judges
        # them (check, alerts) says "unknown", never "licensed" or "no license data".
        more = f" and {len(unread) - 1} more" if len(unread) > 1 else ""
        raise ReadFailed(f"{unread[0]}{more}")


def guest_features(raw: Any) -> tuple[bool | None, tuple[GuestLicenseFeature, ...]]:
    """(licensing applies, features) from a ``c_nvmlGridLicensableFeatures_v4_t``."""
    supported = as_int(getattr(raw, "isGridLicenseSupported", None))
    count = as_int(getattr(raw, "licensableFeaturesCount", None)) or 0
    array = getattr(raw, "gridLicensableFeatures", None)
    features: list[GuestLicenseFeature] = []
    if array is not None:
        for i in range(max(0, min(count, MAX_FEATURES))):
            f = array[i]
            code = as_int(getattr(f, "featureCode", None))
            state = as_int(getattr(f, "featureState", None))
            enabled = as_int(getattr(f, "featureEnabled", None))
            status_name, expires = expiry(getattr(f, "licenseExpiry", None))
            features.append(
                GuestLicenseFeature(
                    feature=FEATURE_CODES.get(code, "unknown") if code is not None else "unknown",
                    licensed=bool(state) if state is not None else None,
                    enabled=bool(enabled) if enabled is not None else None,
                    product_name=nvml_text(getattr(f, "productName", None)),
                    state=None if state is None else ("licensed" if state else "unlicensed"),
                    expiry_status=status_name,
                    expiry_timestamp_seconds=expires,
                )
            )
    return (bool(supported) if supported is not None else None), tuple(features)


def read_guest_license(ctx: GpuContext, out: GpuBuilder) -> None:
    if out.get("virtualization_mode") in HOST_MODES:
        return
    if not ctx.due("license.guest", ctx.cadence(LICENSE)):
        if ctx.previous is not None:  # cadenced like the vGPUs' licenses: the last read stands
            previous = ctx.previous
            out.set(
                guest_license_supported=previous.guest_license_supported,
                guest_licenses=_guest_leases(ctx, previous.guest_licenses),
            )
        return
    got = ctx.attempt("nvmlDeviceGetGridLicensableFeatures", ctx.handle)
    raw = got.value
    if raw is None:
        if got.status == "error":  # the guest's licenses are unknown this cycle, not absent
            raise ReadFailed(f"nvmlDeviceGetGridLicensableFeatures: {got.error}")
        return
    supported, features = guest_features(raw)
    out.set(
        guest_license_supported=supported,
        guest_licenses=_guest_leases(ctx, features) if supported else (),
    )


def _guest_leases(
    ctx: GpuContext, features: tuple[GuestLicenseFeature, ...]
) -> tuple[GuestLicenseFeature, ...]:
    leases = _leases(ctx)
    leases.keep({f.feature for f in features})
    out = []
    for f in features:
        overdue = leases.overdue(f.feature, ctx.now, f.licensed, f.expiry_timestamp_seconds)
        out.append(
            f if overdue == f.renewal_overdue else dataclasses.replace(f, renewal_overdue=overdue)
        )
    return tuple(out)


READERS = [
    FunctionReader("license", read_vgpu_license),
    FunctionReader("guest", read_guest_license),
]
