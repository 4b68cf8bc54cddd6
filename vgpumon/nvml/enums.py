"""NVML's enumeration codes and the names vgpumon gives them, in one place.

The readers decode NVML's answers with these tables (code -> name), the simulator encodes a
scenario's names with their inverse (:func:`codes`), and the names are the model's vocabulary
(``vgpumon.model``): a test keeps the model's tuples and these tables in step.
"""

from __future__ import annotations

from collections.abc import Mapping

# nvmlBrandType_t
BRANDS: Mapping[int, str] = {
    0: "unknown",
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    7: "nvidia_vapps",
    8: "nvidia_vpc",
    9: "nvidia_vcs",
    10: "nvidia_vws",
    11: "nvidia_cloud_gaming",
    12: "quadro_rtx",
    13: "nvidia_rtx",
    14: "nvidia",
    15: "geforce_rtx",
    16: "titan_rtx",
    18: "nvidia_vgamedev",
}
# nvmlDeviceArchitecture_t
ARCHITECTURES: Mapping[int, str] = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}
# nvmlGpuVirtualizationMode_t
VIRTUALIZATION_MODES: Mapping[int, str] = {
    0: "none",
    1: "passthrough",
    2: "vgpu",
    3: "host_vgpu",
    4: "host_vsga",
}
# nvmlComputeMode_t
COMPUTE_MODES: Mapping[int, str] = {
    0: "default",
    1: "exclusive_thread",
    2: "prohibited",
    3: "exclusive_process",
}
# nvmlHostVgpuMode_t
HOST_VGPU_MODES: Mapping[int, str] = {0: "non_sriov", 1: "sriov"}
# nvmlClocksEventReasons bits (docs/nvml-notes.md §4.6)
CLOCK_EVENT_REASONS: Mapping[int, str] = {
    0x001: "idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "power_brake",
    0x100: "display_clock_setting",
}
# nvmlVgpuLicenseInfo_t.currentState
VGPU_LICENSE_STATES: Mapping[int, str] = {
    0: "unknown",
    1: "uninitialized",
    2: "unlicensed_unrestricted",
    3: "unlicensed_restricted",
    4: "unlicensed",
    5: "licensed",
}
# nvmlVgpuLicenseExpiry_t.status
LICENSE_EXPIRY_STATUSES: Mapping[int, str] = {
    0: "not_available",
    1: "invalid",
    2: "valid",
    3: "not_applicable",
    4: "permanent",
}


def codes(table: Mapping[int, str]) -> dict[str, int]:
    """The inverse of one of these tables: name -> code (for the simulator's scenario files)."""
    return {name: code for code, name in table.items()}
