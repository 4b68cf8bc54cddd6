"""Simulated vGPU software licensing: license timelines, and the guest's licensable features.

A *license timeline* says how one license (a vGPU instance's on the host, or a licensable feature
inside a guest) changes over scenario time. It is written either as a state name
(``license: licensed``) or as a mapping::

    license:
      state: uninitialized          # at t = 0
      changes:                      # later transitions, each with its own expiry
        - {at: 3s, state: unlicensed_unrestricted}
        - {at: 6s, state: licensed, expires: 30s}
      after_expiry: unlicensed_restricted

``expires`` is a scenario time. While a license that has one is held, NVML reports the expiry date
(calendar fields, UTC, computed from the clock's start) with status VALID; from that time on the
state becomes ``after_expiry`` (default ``unlicensed_restricted``), ``isLicensed`` drops to 0 and
the expiry status becomes NOT_AVAILABLE (the lease is gone). A held license without ``expires``
reports ``expiry_status`` (default PERMANENT).

``lease`` instead models a networked lease as the NVIDIA License System serves it
(docs/licensing.md): the license ends ``lease`` after its last renewal, and the guest renews it
every ``renew_every`` (default 15 % of the lease) from the change on, so the expiry keeps moving
forward; ``renew_until`` is the scenario time renewals stop (the license service became
unreachable), after which the lease runs out like ``expires``.

The guest side (per-GPU key ``guest``) fills ``nvmlDeviceGetGridLicensableFeatures``; every GPU
without it answers as a real pass-through GPU does (docs/nvml-notes.md §5.3):
``isGridLicenseSupported = 0`` and no features.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import pynvml
import yaml

# The core's licensing functions must be registered before this module's overrides, whatever
# imports this module first (collect_functions lets only a *later* provider replace).
import vgpumon.sim.api.virtualization  # noqa: F401
from vgpumon.nvml.enums import LICENSE_EXPIRY_STATUSES, VGPU_LICENSE_STATES, codes
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.schema import (
    GPU,
    Bool,
    Ctx,
    Enum,
    Key,
    Map,
    Seq,
    Str,
    Type,
    Unit,
)

LICENSE_STATES = codes(VGPU_LICENSE_STATES)
LICENSED = LICENSE_STATES["licensed"]
EXPIRY_STATUSES = codes(LICENSE_EXPIRY_STATUSES)
EXPIRY_VALID = EXPIRY_STATUSES["valid"]
FEATURE_CODES = {"unknown": 0, "vgpu": 1, "nvidia_rtx": 2, "gaming": 3, "compute": 4, "vgamedev": 5}


# --------------------------------------------------------------------------- timelines


@dataclass(frozen=True)
class LicensePhase:
    at: float
    state: int
    expires: float | None = None
    expiry_status: int = EXPIRY_STATUSES["permanent"]
    lease: float | None = None  # a renewed lease this long (seconds)
    renew_every: float | None = None
    renew_until: float | None = None

    def end(self, t: float) -> float | None:
        """When the license held at ``t`` ends: ``expires``, or the lease renewed last."""
        if self.lease is None:
            return self.expires
        every = self.renew_every or 0.15 * self.lease
        until = t if self.renew_until is None else min(t, self.renew_until)
        renewed = self.at + max(0.0, math.floor((until - self.at) / every)) * every
        return renewed + self.lease


@dataclass(frozen=True)
class LicenseReading:
    """What NVML reports for a license at one instant."""

    state: int
    licensed: bool
    expiry_status: int
    expiry_at: float | None  # scenario time of the expiry (VALID only)


@dataclass(frozen=True)
class LicenseTimeline:
    phases: tuple[LicensePhase, ...]
    after_expiry: int = LICENSE_STATES["unlicensed_restricted"]

    @staticmethod
    def constant(state: int = LICENSED) -> LicenseTimeline:
        return LicenseTimeline((LicensePhase(0.0, state),))

    def at(self, t: float) -> LicenseReading:
        phase = self.phases[0]
        for p in self.phases:
            if p.at <= t:
                phase = p
            else:
                break
        end = phase.end(t)
        if end is not None:
            if t >= end:
                return LicenseReading(
                    self.after_expiry, False, EXPIRY_STATUSES["not_available"], None
                )
            return LicenseReading(phase.state, phase.state == LICENSED, EXPIRY_VALID, end)
        status = (
            phase.expiry_status if phase.state == LICENSED else EXPIRY_STATUSES["not_available"]
        )
        return LicenseReading(phase.state, phase.state == LICENSED, status, None)


def fill_expiry(target: Any, reading: LicenseReading, epoch: float) -> None:
    """Write a reading into a ``c_nvml{Vgpu,Grid}LicenseExpiry_t`` (calendar fields, UTC)."""
    target.status = reading.expiry_status
    if reading.expiry_at is None:
        return
    when = dt.datetime.fromtimestamp(epoch + reading.expiry_at, tz=dt.timezone.utc)
    target.year, target.month, target.day = when.year, when.month, when.day
    target.hour, target.min, target.sec = when.hour, when.minute, when.second


_STATE = Enum(LICENSE_STATES)
_PHASE = Map(
    {
        "at": Key(Unit("duration", lo=0), "scenario time of the change", required=True),
        "state": Key(_STATE, "license state from then on", required=True),
        "expires": Key(Unit("duration", lo=0), "scenario time the license expires", "never"),
        "expiry_status": Key(
            Enum(EXPIRY_STATUSES), "status of a license without expires", "permanent"
        ),
        "lease": Key(Unit("duration", lo=1e-3), "a renewed lease this long (instead of expires)"),
        "renew_every": Key(
            Unit("duration", lo=1e-3), "the guest renews the lease this often", "15 % of the lease"
        ),
        "renew_until": Key(Unit("duration", lo=0), "scenario time the renewals stop", "never"),
    }
)


class _TimelineType(Type):
    expected = "a license state name or a license mapping"

    def __init__(self) -> None:
        self._map = Map(
            {
                "state": Key(_STATE, "state at t = 0", "licensed"),
                "expires": Key(
                    Unit("duration", lo=0), "scenario time the t = 0 license expires", "never"
                ),
                "expiry_status": Key(
                    Enum(EXPIRY_STATUSES), "status of a license without expires", "permanent"
                ),
                "changes": Key(Seq(_PHASE), "later transitions", "none"),
                "lease": Key(
                    Unit("duration", lo=1e-3), "a renewed lease this long (instead of expires)"
                ),
                "renew_every": Key(
                    Unit("duration", lo=1e-3),
                    "the guest renews the lease this often",
                    "15 % of the lease",
                ),
                "renew_until": Key(
                    Unit("duration", lo=0), "scenario time the renewals stop", "never"
                ),
                "after_expiry": Key(
                    _STATE, "state once a license expired", "unlicensed_restricted"
                ),
            }
        )

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> LicenseTimeline:
        if isinstance(node, yaml.ScalarNode):
            return LicenseTimeline.constant(_STATE.parse(node, path, ctx))
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, ctx)
        d = self._map.parse(node, path, ctx)
        for where, item in [(path, d)] + [
            (f"{path}.changes[{i}]", c) for i, c in enumerate(d.get("changes", []))
        ]:
            if "expires" in item and "lease" in item:
                raise ctx.error_at(f"{where}.lease", "give expires or lease, not both")
        phases = [
            LicensePhase(
                0.0,
                d.get("state", LICENSED),
                d.get("expires"),
                d.get("expiry_status", EXPIRY_STATUSES["permanent"]),
                d.get("lease"),
                d.get("renew_every"),
                d.get("renew_until"),
            )
        ]
        for i, c in enumerate(sorted(d.get("changes", []), key=lambda c: c["at"])):
            if c.get("expires") is not None and c["expires"] <= c["at"]:
                raise ctx.error_at(f"{path}.changes[{i}].expires", "must be later than at")
            phases.append(
                LicensePhase(
                    c["at"],
                    c["state"],
                    c.get("expires"),
                    c.get("expiry_status", EXPIRY_STATUSES["permanent"]),
                    c.get("lease"),
                    c.get("renew_every"),
                    c.get("renew_until"),
                )
            )
        return LicenseTimeline(
            tuple(phases), d.get("after_expiry", LICENSE_STATES["unlicensed_restricted"])
        )


LICENSE = _TimelineType()


# --------------------------------------------------------------------------- guest features

GUEST_FEATURE = Map(
    {
        "feature": Key(Enum(FEATURE_CODES), ", ".join(FEATURE_CODES), required=True),
        "product": Key(Str(), "licensed product name", '""'),
        "enabled": Key(Bool(), "feature enabled", "true"),
        "license": Key(LICENSE, "license timeline; featureState is 1 while licensed", "licensed"),
        "license_info": Key(Str(), "deprecated licenseInfo text", '""'),
    },
    expected="a licensable feature mapping",
)
GUEST = Map(
    {
        "licensing": Key(Bool(), "isGridLicenseSupported", "true"),
        "features": Key(Seq(GUEST_FEATURE), "up to 3 licensable features", "none"),
    },
    expected="a guest mapping",
)
GPU.register(
    "guest",
    Key(GUEST, "inside a vGPU VM: licensable features (see docs/vgpu.md)", "no licensing"),
)
MAX_FEATURES = pynvml.NVML_GRID_LICENSE_FEATURE_MAX_COUNT
VGPU_GUEST = 2  # NVML_GPU_VIRTUALIZATION_MODE_VGPU


# The core's VirtualizationApi answers "no licensing" everywhere; this provider replaces its two
# licensing functions (registered later, ``replaces=True``) with the ``guest`` key's features.


@register_provider
class GuestLicenseApi(Provider):
    @nvml_function(replaces=True)
    def nvmlDeviceGetGridLicensableFeatures_v4(self, handle: Any) -> Any:
        gpu = self.core.physical(handle)
        out = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        guest = gpu.spec.extra.get("guest")
        if not guest:
            # SUCCESS everywhere; licensing applies only inside a vGPU guest (docs/nvml-notes.md
            # §5.3).
            out.isGridLicenseSupported = int(gpu.spec.virtualization_mode == VGPU_GUEST)
            return out
        out.isGridLicenseSupported = 1 if guest.get("licensing", True) else 0
        features = guest.get("features", [])[:MAX_FEATURES]
        out.licensableFeaturesCount = len(features)
        t = self.core.t()
        for i, f in enumerate(features):
            timeline: LicenseTimeline = f.get("license", LicenseTimeline.constant())
            reading = timeline.at(t)
            entry = out.gridLicensableFeatures[i]
            entry.featureCode = f["feature"]
            entry.featureState = 1 if reading.licensed else 0
            entry.licenseInfo = f.get("license_info", "")
            entry.productName = f.get("product", "")
            entry.featureEnabled = 1 if f.get("enabled", True) else 0
            fill_expiry(entry.licenseExpiry, reading, self.core.epoch)
        return out

    @nvml_function(replaces=True)
    def nvmlDeviceGetGridLicensableFeatures(self, handle: Any) -> Any:
        return self.nvmlDeviceGetGridLicensableFeatures_v4(handle)
