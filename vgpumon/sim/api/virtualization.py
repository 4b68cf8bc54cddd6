"""Virtualization mode and the guest-side licensing structure (docs/nvml-notes.md §5.1, §5.3).

Outside a vGPU guest the licensing call still succeeds, with ``isGridLicenseSupported`` 0 and no
features, as a real pass-through GPU answers (docs/nvml-notes.md §5.3). The vGPU guest simulation
(scenario key ``guest``) supplies features by replacing
:meth:`VirtualizationApi.licensable_features` in a subclass registered with ``replaces=True``.
"""

from __future__ import annotations

from typing import Any

import pynvml

from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_keys import VIRTUALIZATION_MODES
from vgpumon.sim.state import GpuState


@register_provider
class VirtualizationApi(Provider):
    @nvml_function()
    def nvmlDeviceGetVirtualizationMode(self, handle: Any) -> int:
        return self.core.device(handle).gpu.spec.virtualization_mode

    def licensable_features(self, gpu: GpuState) -> list[Any]:
        """The ``c_nvmlGridLicensableFeature_v4_t`` entries (none outside a vGPU guest)."""
        return []

    @nvml_function()
    def nvmlDeviceGetGridLicensableFeatures_v4(self, handle: Any) -> Any:
        gpu = self.core.physical(handle)
        features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        features.isGridLicenseSupported = int(
            gpu.spec.virtualization_mode == VIRTUALIZATION_MODES["vgpu"]
        )
        entries = self.licensable_features(gpu)[: pynvml.NVML_GRID_LICENSE_FEATURE_MAX_COUNT]
        features.licensableFeaturesCount = len(entries)
        for i, entry in enumerate(entries):
            features.gridLicensableFeatures[i] = entry
        return features

    @nvml_function()
    def nvmlDeviceGetGridLicensableFeatures(self, handle: Any) -> Any:
        return self.nvmlDeviceGetGridLicensableFeatures_v4(handle)
