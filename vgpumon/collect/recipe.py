"""What builds ``serve``'s sampler, as plain values that travel to the sampler process.

The sampler process (:mod:`vgpumon.collect.sampler_child`) unpickles a :class:`SamplerRecipe` and
calls it. It holds values only (no settings object, no enricher objects), so that unpickling it
imports nothing but the sampler's own modules: the sampler process loads no HTTP server, no
settings table and no event loop, and stays small (docs/exporter.md, "Memory").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vgpumon.collect.base import SamplerConfig

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher
    from vgpumon.collect.metering import MeteringConfig
    from vgpumon.collect.sampler import Sampler

log = logging.getLogger("vgpumon.serve")


@dataclass(frozen=True)
class SamplerRecipe:
    """The sampler of ``serve``: its config, NVML module, enrichers and metering, its logging."""

    config: SamplerConfig
    sim: str | None = None
    nvml_module: str | None = None
    libvirt_uri: str | None = None
    kubelet_socket: str | None = None
    kubernetes_resources: tuple[str, ...] = ()
    kubernetes_api: bool = False
    metering: MeteringConfig | None = None  # None: metering off
    log_level: str = "info"
    log_format: str = "logfmt"
    # Logged once the NVML module is found, so that a module that cannot be imported is the one
    # line said (the warning that running as root buys nothing, for instance).
    warning: str | None = None

    def __call__(self) -> Sampler:
        """Build the sampler (in the sampler process).

        A module that cannot be imported is an installation error (raised: exit 2); a driver that
        is not loaded yet is not: the sampler starts uninitialised, says up 0 and why, and keeps
        retrying nvmlInit.
        """
        from vgpumon import allocator, logs
        from vgpumon.collect.sampler import Sampler
        from vgpumon.nvml.loader import resolve_module
        from vgpumon.nvml.session import NvmlSession

        # Before any thread starts (docs/exporter.md, "Memory"): large bodies go back to the
        # system when freed, and the per-GPU worker threads share two malloc arenas.
        allocator.tune()
        logs.configure(self.log_level, self.log_format)
        module, source = resolve_module(self.sim, self.nvml_module)
        if self.warning is not None:
            log.warning("%s", self.warning)
        session = NvmlSession(module, source)
        try:
            session.init()
            init_error = None
        except Exception as exc:  # noqa: BLE001 - any failure of nvmlInit is retried
            init_error = str(exc) or type(exc).__name__
        sampler = Sampler(session, self.config, enrichers=self.enrichers())
        if init_error is not None:
            log.warning(
                "NVML could not be initialised from %s (%s); serving vgpumon_up 0 and retrying",
                source,
                init_error,
            )
            sampler.start_uninitialised(init_error)
        return sampler

    def enrichers(self) -> list[Enricher]:
        """The enrichers asked for (:func:`vgpumon.collect.enrich.build.build`), then metering, last
        once VM and pod names are merged. A missing binding is a one-line ``ConfigError``."""
        from vgpumon.collect.enrich.build import build

        enrichers = build(
            libvirt_uri=self.libvirt_uri,
            kubelet_socket=self.kubelet_socket,
            resources=self.kubernetes_resources,
            kubernetes_api=self.kubernetes_api,
        )
        if self.metering is not None:
            from vgpumon.collect.metering import MeteringStage

            enrichers.append(MeteringStage(self.metering))
        return enrichers
