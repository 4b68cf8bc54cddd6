"""GPU model presets: what ``model: h100-sxm-80gb`` fills in under a scenario's own keys.

Presets are written as scenario data (the same keys and units a file uses) and go through the same
schema, so a preset can never hold a value a file could not. ``h200-nvl-141gb`` reproduces what the
real H200 reported (docs/nvml-notes.md §14) — including its name
"NVIDIA H200", 150,754,820,096 bytes of memory and the 700 W limit — and its MIG table is the one
R580 reported there (docs/nvml-notes.md §8.2). The other presets use the public specifications of
each part; values nobody measured here (idle power, temperature thresholds) are plausible defaults,
not measurements.
"""

from __future__ import annotations

from typing import Any


def _profiles(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows: index, id, name, slices, instances, SMs, CE, dec, enc, jpg, ofa, MiB, placements."""
    keys = (
        "index",
        "id",
        "name",
        "slices",
        "instances",
        "sm_count",
        "copy_engines",
        "decoders",
        "encoders",
        "jpeg",
        "ofa",
        "memory",
        "placements",
    )
    out = []
    for row in rows:
        d = dict(zip(keys, row, strict=True))
        d["memory"] = f"{d['memory']}MiB"
        d["placements"] = [list(p) for p in d["placements"]]
        out.append(d)
    return out


ONE = [(i, 1) for i in range(7)]
ONE_WIDE = [(0, 2), (2, 2), (4, 2), (6, 2)]
TWO = [(0, 2), (2, 2), (4, 2)]
THREE = [(0, 4), (4, 4)]
FOUR = [(0, 4)]
SEVEN = [(0, 8)]

# R580 on a real H200 (docs/nvml-notes.md §8.2), MIG disabled.
H200_PROFILES = _profiles(
    [
        (0, 19, "1g.18gb", 1, 7, 16, 1, 1, 0, 1, 0, 16384, ONE),
        (1, 14, "2g.35gb", 2, 3, 32, 2, 2, 0, 2, 0, 33280, TWO),
        (2, 9, "3g.71gb", 3, 2, 60, 3, 3, 0, 3, 0, 71424, THREE),
        (3, 5, "4g.71gb", 4, 1, 64, 4, 4, 0, 4, 0, 71424, FOUR),
        (4, 0, "7g.141gb", 7, 1, 132, 8, 7, 0, 7, 1, 143360, SEVEN),
        (7, 20, "1g.18gb+me", 1, 1, 16, 1, 1, 0, 1, 1, 16384, ONE),
        (9, 15, "1g.35gb", 1, 4, 26, 1, 1, 0, 1, 0, 33280, ONE_WIDE),
    ]
)

H100_80GB_PROFILES = _profiles(
    [
        (0, 19, "1g.10gb", 1, 7, 16, 1, 1, 0, 1, 0, 9984, ONE),
        (1, 14, "2g.20gb", 2, 3, 32, 2, 2, 0, 2, 0, 20096, TWO),
        (2, 9, "3g.40gb", 3, 2, 60, 3, 3, 0, 3, 0, 40448, THREE),
        (3, 5, "4g.40gb", 4, 1, 64, 4, 4, 0, 4, 0, 40448, FOUR),
        (4, 0, "7g.80gb", 7, 1, 132, 8, 7, 0, 7, 1, 81152, SEVEN),
        (7, 20, "1g.10gb+me", 1, 1, 16, 1, 1, 0, 1, 1, 9984, ONE),
        (9, 15, "1g.20gb", 1, 4, 26, 1, 1, 0, 1, 0, 20096, ONE_WIDE),
    ]
)

A100_40GB_PROFILES = _profiles(
    [
        (0, 19, "1g.5gb", 1, 7, 14, 1, 0, 0, 0, 0, 4864, ONE),
        (1, 14, "2g.10gb", 2, 3, 28, 2, 1, 0, 0, 0, 9984, TWO),
        (2, 9, "3g.20gb", 3, 2, 42, 3, 2, 0, 0, 0, 20096, THREE),
        (3, 5, "4g.20gb", 4, 1, 56, 4, 2, 0, 0, 0, 20096, FOUR),
        (4, 0, "7g.40gb", 7, 1, 98, 7, 5, 0, 1, 1, 40448, SEVEN),
        (7, 20, "1g.5gb+me", 1, 1, 14, 1, 1, 0, 1, 1, 4864, ONE),
    ]
)

_HOPPER_CLOCKS = {
    "max": {"graphics": 1980, "sm": 1980, "memory": 2619, "video": 1755},
    "idle": {"graphics": 345, "sm": 345, "memory": 2619, "video": 765},
}

MODELS: dict[str, dict[str, Any]] = {
    "h100-sxm-80gb": {
        "name": "NVIDIA H100 80GB HBM3",
        "architecture": "hopper",
        "compute_capability": "9.0",
        "sm_count": 132,
        "pci_device_id": 0x233010DE,
        "pci_subsystem_id": 0x16C110DE,
        "vbios_version": "96.00.99.00.01",
        "board_part_number": "692-2G520-0200-000",
        "memory": {"total": "81559MiB", "reserved": "615MiB", "bar1_total": "128GiB"},
        "power": {
            "idle": "72W",
            "max_draw": "690W",
            "limit": "700W",
            "default_limit": "700W",
            "min_limit": "200W",
            "max_limit": "700W",
        },
        "temperature": {
            "idle": 31,
            "load": 68,
            "shutdown": 92,
            "slowdown": 89,
            "gpu_max": 87,
            "memory_max": 95,
        },
        "clocks": _HOPPER_CLOCKS,
        "pcie": {"generation": 5, "width": 16, "max_generation": 5, "max_width": 16},
        "fans": {"count": 0},
        "nvlink_links": 18,
        "gpm": True,
        "mig_profiles": H100_80GB_PROFILES,
    },
    "h200-nvl-141gb": {
        "name": "NVIDIA H200",
        "architecture": "hopper",
        "compute_capability": "9.0",
        "sm_count": 132,
        "pci_device_id": 0x233510DE,
        "pci_subsystem_id": 0x18B010DE,
        "vbios_version": "96.00.AF.00.01",
        "board_part_number": "692-2G540-0200-000",
        "memory": {"total": 150754820096, "reserved": 644939776, "bar1_total": "256GiB"},
        "power": {
            "idle": "78W",
            "max_draw": "660W",
            "limit": "700W",
            "default_limit": "700W",
            "min_limit": "200W",
            "max_limit": "700W",
        },
        "temperature": {
            "idle": 33,
            "load": 62,
            "shutdown": 92,
            "slowdown": 89,
            "gpu_max": 87,
            "memory_max": 95,
        },
        "clocks": {
            "max": {"graphics": 1980, "sm": 1980, "memory": 3201, "video": 1545},
            "idle": {"graphics": 345, "sm": 345, "memory": 3201, "video": 765},
        },
        "pcie": {"generation": 5, "width": 16, "max_generation": 5, "max_width": 16},
        "fans": {"count": 0},
        "nvlink_links": 0,
        "gpm": True,
        "mig_profiles": H200_PROFILES,
    },
    "a100-sxm-40gb": {
        "name": "NVIDIA A100-SXM4-40GB",
        "architecture": "ampere",
        "compute_capability": "8.0",
        "sm_count": 108,
        "pci_device_id": 0x20B010DE,
        "pci_subsystem_id": 0x134F10DE,
        "vbios_version": "92.00.45.00.03",
        "board_part_number": "692-2G506-0200-003",
        "memory": {"total": "40960MiB", "reserved": "561MiB", "bar1_total": "64GiB"},
        "power": {
            "idle": "55W",
            "max_draw": "390W",
            "limit": "400W",
            "default_limit": "400W",
            "min_limit": "100W",
            "max_limit": "400W",
        },
        "temperature": {
            "idle": 29,
            "load": 64,
            "shutdown": 92,
            "slowdown": 89,
            "gpu_max": 87,
            "memory_max": 95,
        },
        "clocks": {
            "max": {"graphics": 1410, "sm": 1410, "memory": 1215, "video": 1290},
            "idle": {"graphics": 210, "sm": 210, "memory": 1215, "video": 585},
        },
        "pcie": {"generation": 4, "width": 16, "max_generation": 4, "max_width": 16},
        "fans": {"count": 0},
        "nvlink_links": 12,
        "gpm": False,
        "mig_profiles": A100_40GB_PROFILES,
    },
    "l40s": {
        "name": "NVIDIA L40S",
        "architecture": "ada",
        "compute_capability": "8.9",
        "sm_count": 142,
        "pci_device_id": 0x26B910DE,
        "pci_subsystem_id": 0x185110DE,
        "vbios_version": "95.02.66.00.02",
        "board_part_number": "900-2G133-0080-000",
        "memory": {"total": "46068MiB", "reserved": "527MiB", "bar1_total": "64GiB"},
        "power": {
            "idle": "35W",
            "max_draw": "345W",
            "limit": "350W",
            "default_limit": "350W",
            "min_limit": "100W",
            "max_limit": "350W",
        },
        "temperature": {
            "idle": 28,
            "load": 71,
            "shutdown": 95,
            "slowdown": 92,
            "gpu_max": 89,
            "memory_max": 95,
        },
        "clocks": {
            "max": {"graphics": 2520, "sm": 2520, "memory": 9001, "video": 1965},
            "idle": {"graphics": 210, "sm": 210, "memory": 405, "video": 555},
        },
        "pcie": {"generation": 4, "width": 16, "max_generation": 4, "max_width": 16},
        "fans": {"count": 0},
        "nvlink_links": 0,
        "gpm": False,
    },
}
