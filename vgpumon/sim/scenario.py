"""Scenario files: the core keys, model presets underneath them, and the parsed :class:`Scenario`.

The keys are declared here as data (types, defaults, docs) and registered in the schema registries;
``docs/scenarios.md`` documents the same tables and a test keeps the two in step. Parsing yields
plain values; :func:`build_scenario` merges each GPU over its model preset, expands ``count``,
assigns deterministic identities and checks what only makes sense across keys (MIG placements,
process ownership, fault targets), citing the file line of the offending key.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pynvml
import yaml

from vgpumon import yamlfile
from vgpumon.errors import ConfigError
from vgpumon.sim import registry
from vgpumon.sim.faults import FaultSpec, build_faults
from vgpumon.sim.models import MODELS
from vgpumon.sim.patterns import PatternSpec
from vgpumon.sim.schema import (
    GPU,
    TOP_LEVEL,
    Bool,
    Ctx,
    Enum,
    IdOrName,
    Int,
    Key,
    Map,
    OneOf,
    PatternOf,
    Seq,
    Size,
    Str,
    Type,
    Unit,
    compose,
    join,
    node_of,
)

MIB = 2**20

ARCHITECTURES = {
    "kepler": 2,
    "maxwell": 3,
    "pascal": 4,
    "volta": 5,
    "turing": 6,
    "ampere": 7,
    "ada": 8,
    "hopper": 9,
    "blackwell": 10,
}
BRANDS = {
    name[len("NVML_BRAND_") :].lower(): value
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_BRAND_") and name != "NVML_BRAND_COUNT"
}
VIRTUALIZATION_MODES = {"none": 0, "passthrough": 1, "vgpu": 2, "host_vgpu": 3, "host_vsga": 4}
COMPUTE_MODES = {"default": 0, "exclusive_thread": 1, "prohibited": 2, "exclusive_process": 3}
CLOCK_REASONS = {
    "idle": 0x001,
    "applications_clocks_setting": 0x002,
    "sw_power_cap": 0x004,
    "hw_slowdown": 0x008,
    "sync_boost": 0x010,
    "sw_thermal": 0x020,
    "hw_thermal": 0x040,
    "power_brake": 0x080,
    "display_clock_setting": 0x100,
}
PROCESS_TYPES = ("compute", "graphics", "compute+graphics", "mps")
# CI profile index (== CI profile id) for a compute instance of that many slices.
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
MAX_MIG_DEVICES = 7

# Physical sense for scenario numbers (docs/design.md, rule 9): a value outside these bands is a
# typo, and refusing it with its line beats simulating a GPU that no NVML would ever describe.
MAX_WATTS = 10_000.0  # the largest boards draw about a tenth of this
MIN_CELSIUS, MAX_CELSIUS = -40.0, 200.0  # NVML thresholds sit near 90 °C; silicon fails long before
MAX_MHZ = 100_000.0  # GPU clocks are a few GHz
MAX_SM_COUNT = 1024  # the largest GPUs have fewer than 200
DEFAULT_DRIVER_VERSION = "580.159.04"

# Per-call costs measured on a real data-center GPU (driver 580; docs/nvml-notes.md §14), seconds
# per call. "*" is every other function: most simple getters cost 1-2 µs there (utilization 1.1,
# temperature 1.3, P-state 1.9).
REALISTIC_LATENCY = {
    "*": 1.5e-6,
    "nvmlDeviceGetMemoryInfo": 6.6e-6,
    "nvmlDeviceGetComputeRunningProcesses": 9.1e-6,
    "nvmlDeviceGetEncoderUtilization": 2.2e-6,
    "nvmlDeviceGetTotalEnergyConsumption": 3.026e-3,
    "nvmlDeviceGetPcieThroughput": 20.927e-3,
    "nvmlDeviceGetFanSpeed": 143e-6,
    "nvmlDeviceGetFanSpeed_v2": 143e-6,
    "nvmlDeviceGetMigMode": 146e-6,
    "nvmlGpmSampleGet": 48e-6,
}

# --------------------------------------------------------------------------- value types


class _Mask(Type):
    """A bitmask as a number (0x1FF) or a list of names."""

    def __init__(self, names: dict[str, int]):
        self.names = names
        self.expected = "a bitmask number or a list of: " + ", ".join(names)

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> int:
        if isinstance(node, yaml.SequenceNode):
            mask = 0
            for item in Seq(Enum(self.names)).parse(node, path, ctx):
                mask |= item
            return mask
        return Int(lo=0).parse(node, path, ctx)


def _cc(value: str) -> bool:
    parts = value.split(".")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


def _pci(value: str) -> bool:
    return _parse_bus_id(value) is not None


def _parse_bus_id(value: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) from "00000000:18:00.0", "0000:18:00.0" or "18:00.0"."""
    try:
        text = value.strip()
        rest, function = text.rsplit(".", 1)
        parts = rest.split(":")
        if len(parts) == 2:
            parts.insert(0, "0")
        if len(parts) != 3:
            return None
        domain, bus, device = (int(p, 16) for p in parts)
        fn = int(function, 16)
    except ValueError:
        return None
    if not (
        0 <= bus <= 0xFF and 0 <= device <= 0x1F and 0 <= fn <= 7 and 0 <= domain <= 0xFFFFFFFF
    ):
        return None
    return domain, bus, device, fn


RATIO = "ratio"
LOAD_FIELDS: dict[str, tuple[str, float, str]] = {
    # name: (unit, default, doc)
    "duty": (
        RATIO,
        0.0,
        "fraction of time any kernel runs → NVML utilization, GPM graphics activity",
    ),
    "sm_fraction": (
        RATIO,
        1.0,
        "fraction of SMs busy while kernels run → GPM SM activity = duty × sm_fraction",
    ),
    "occupancy": (
        RATIO,
        0.5,
        "resident warps / maximum on busy SMs → GPM occupancy = duty × sm_fraction × occupancy",
    ),
    "tensor": (RATIO, 0.0, "fraction of busy SM time on tensor cores → GPM tensor (any, HMMA)"),
    "fp64": (RATIO, 0.0, "fraction of busy SM time on FP64 → GPM FP64"),
    "fp32": (RATIO, 0.0, "fraction of busy SM time on FP32 → GPM FP32"),
    "fp16": (RATIO, 0.0, "fraction of busy SM time on FP16 → GPM FP16"),
    "integer": (RATIO, 0.0, "fraction of busy SM time on integer ops → GPM integer"),
    "dram": (
        RATIO,
        0.0,
        "fraction of DRAM bandwidth in use → NVML memory utilization, GPM DRAM activity",
    ),
    "pcie_tx": ("byte_rate", 0.0, "PCIe bytes/s sent → PCIe throughput, GPM PCIe TX, field 197"),
    "pcie_rx": (
        "byte_rate",
        0.0,
        "PCIe bytes/s received → PCIe throughput, GPM PCIe RX, field 198",
    ),
    "encoder": (RATIO, 0.0, "NVENC utilization"),
    "decoder": (RATIO, 0.0, "NVDEC utilization"),
    "jpeg": (RATIO, 0.0, "NVJPG utilization"),
    "ofa": (RATIO, 0.0, "OFA utilization"),
}
LOAD = Map(
    {
        name: Key(PatternOf(unit), doc, str(default))
        for name, (unit, default, doc) in LOAD_FIELDS.items()
    },
    expected="a load mapping",
)

CLOCK_SET = Map(
    {k: Key(Unit("mhz")) for k in ("graphics", "sm", "memory", "video")}, expected="clocks in MHz"
)

MEMORY = Map(
    {
        "total": Key(Size(), "framebuffer size", "from model"),
        "reserved": Key(
            Size(),
            "driver-reserved memory (v2 'reserved'; v1 'used' includes it)",
            "from model or 0",
        ),
        "used": Key(
            PatternOf("size"),
            "memory in use by applications (v2 'used')",
            "sum of running processes",
        ),
        "bar1_total": Key(Size(), "BAR1 aperture", "from model or 256MiB"),
        "bar1_used": Key(PatternOf("size"), "BAR1 in use", "3MiB"),
    }
)
POWER = Map(
    {
        "draw": Key(
            PatternOf("watts", 0, MAX_WATTS), "power draw", "idle + (max_draw − idle) × activity"
        ),
        "idle": Key(Unit("watts", 0, MAX_WATTS), "draw with nothing running"),
        "max_draw": Key(Unit("watts", 0, MAX_WATTS), "draw at duty 1 on every SM"),
        "limit": Key(Unit("watts", 0, MAX_WATTS), "power management limit"),
        "default_limit": Key(Unit("watts", 0, MAX_WATTS), "default limit", "limit"),
        "min_limit": Key(Unit("watts", 0, MAX_WATTS), "lowest settable limit", "limit"),
        "max_limit": Key(Unit("watts", 0, MAX_WATTS), "highest settable limit", "limit"),
        "enforced_limit": Key(Unit("watts", 0, MAX_WATTS), "enforced limit", "limit"),
    }
)
TEMPERATURE = Map(
    {
        "gpu": Key(
            PatternOf("celsius", MIN_CELSIUS, MAX_CELSIUS),
            "GPU temperature",
            "idle + (load − idle) × power fraction",
        ),
        "memory": Key(
            PatternOf("celsius", MIN_CELSIUS, MAX_CELSIUS), "HBM temperature (field 82)", "gpu − 4"
        ),
        "idle": Key(Unit("celsius", MIN_CELSIUS, MAX_CELSIUS), "temperature at idle power", "30"),
        "load": Key(Unit("celsius", MIN_CELSIUS, MAX_CELSIUS), "temperature at max_draw", "70"),
        "shutdown": Key(Unit("celsius", MIN_CELSIUS, MAX_CELSIUS), "shutdown threshold", "92"),
        "slowdown": Key(Unit("celsius", MIN_CELSIUS, MAX_CELSIUS), "slowdown threshold", "89"),
        "gpu_max": Key(
            Unit("celsius", MIN_CELSIUS, MAX_CELSIUS), "GPU max operating threshold", "87"
        ),
        "memory_max": Key(Unit("celsius", MIN_CELSIUS, MAX_CELSIUS), "memory max threshold", "95"),
    }
)
CLOCKS = Map(
    {
        "max": Key(CLOCK_SET, "maximum clocks (MHz)"),
        "idle": Key(CLOCK_SET, "clocks with nothing running"),
        "current": Key(
            Map(
                {
                    k: Key(PatternOf("mhz", 0, MAX_MHZ))
                    for k in ("graphics", "sm", "memory", "video")
                }
            ),
            "explicit current clocks",
            "max when busy, idle otherwise",
        ),
    }
)
CLOCK_EVENT_REASONS = Map(
    {
        "supported": Key(_Mask(CLOCK_REASONS), "supported reasons", "0x1FF"),
        "active": Key(
            _Mask(CLOCK_REASONS), "active reasons, constant", "idle when duty is 0, else none"
        ),
    }
)
FANS = Map(
    {
        "count": Key(Int(0, 16), "number of fans (0: passive board)", "0"),
        "speed": Key(PatternOf("percent_open"), "fan speed, fraction of nominal maximum", "0.3"),
    }
)
ECC = Map(
    {
        "supported": Key(Bool(), "ECC exists on this board", "true"),
        "enabled": Key(Bool(), "current mode", "true"),
        "pending": Key(Bool(), "mode after reboot", "enabled"),
        "corrected_volatile": Key(Int(lo=0), "", "0"),
        "uncorrected_volatile": Key(Int(lo=0), "", "0"),
        "corrected_aggregate": Key(Int(lo=0), "", "0"),
        "uncorrected_aggregate": Key(Int(lo=0), "", "0"),
    }
)
REMAPPED_ROWS = Map(
    {
        "correctable": Key(Int(lo=0), "rows remapped for correctable errors", "0"),
        "uncorrectable": Key(Int(lo=0), "rows remapped for uncorrectable errors", "0"),
        "pending": Key(Bool(), "a remap waits for a reset", "false"),
        "failed": Key(Bool(), "a remap failed", "false"),
        "histogram": Key(
            Map({k: Key(Int(lo=0)) for k in ("max", "high", "partial", "low", "none")}),
            "row remapper bank availability",
            "max: 3072, others 0",
        ),
    }
)
PCIE = Map(
    {
        "generation": Key(Int(1, 7), "current link generation"),
        "width": Key(Int(1, 32), "current link width"),
        "max_generation": Key(Int(1, 7), "", "generation"),
        "max_width": Key(Int(1, 32), "", "width"),
        "replay_counter": Key(Int(lo=0), "", "0"),
    }
)
NVLINK = Map(
    {
        "down": Key(Seq(Int(0, 17), one_or_many=True), "links whose state is down", "none"),
        "traffic": Key(
            Int(0, 2**40),
            "data bytes per second per active link and direction (the TX/RX counters grow by it)",
            "0",
        ),
        "crc_errors": Key(Int(0, 2**32), "CRC errors per active link (a constant count)", "0"),
        "replay_errors": Key(Int(0, 2**32), "replay errors per active link", "0"),
        "recovery_errors": Key(Int(0, 2**32), "recovery errors per active link", "0"),
    }
)
MIG_PROFILE = Map(
    {
        "index": Key(Int(0, 0x11), "NVML_GPU_INSTANCE_PROFILE_* index", required=True),
        "id": Key(Int(lo=0), "profile id", required=True),
        "name": Key(Str(), 'name without "MIG ", e.g. "3g.40gb"', required=True),
        "slices": Key(Int(1, 8), "compute slices", required=True),
        "instances": Key(Int(1, 8), "maximum instances", required=True),
        "sm_count": Key(Int(1, MAX_SM_COUNT), "", required=True),
        "copy_engines": Key(Int(lo=0), "", "0"),
        "decoders": Key(Int(lo=0), "", "0"),
        "encoders": Key(Int(lo=0), "", "0"),
        "jpeg": Key(Int(lo=0), "", "0"),
        "ofa": Key(Int(lo=0), "", "0"),
        "memory": Key(Size(), "memory of an instance", required=True),
        "placements": Key(
            Seq(Seq(Int(lo=0), min_len=2), min_len=1),
            "[start, size] in memory slices",
            required=True,
        ),
    },
    expected="a MIG profile mapping",
)
COMPUTE_INSTANCE = OneOf(
    (yaml.ScalarNode, Int(1, 8)),
    (
        yaml.MappingNode,
        Map(
            {
                "slices": Key(Int(1, 8), "compute slices", "all of the GPU instance's"),
                "id": Key(Int(lo=0), "compute instance id", "0, 1, … in order"),
                "placement": Key(Int(0, 7), "first compute slice", "first free"),
                "load": Key(LOAD, "load of this MIG device", "the GPU instance's load"),
                "mig_index": Key(
                    Int(0, 63), "index for nvmlDeviceGetMigDeviceHandleByIndex", "next free"
                ),
                "uuid": Key(
                    Str('a MIG UUID like "MIG-…"', lambda s: s.startswith("MIG-")),
                    "",
                    "derived from the seed",
                ),
            }
        ),
    ),
    expected="a slice count or a compute-instance mapping",
)


GPU_INSTANCE = Map(
    {
        "profile": Key(
            IdOrName('a profile name like "3g.40gb" or a profile id'),
            'profile name ("3g.40gb" or "MIG 3g.40gb") or profile id',
            required=True,
        ),
        "id": Key(Int(lo=0), "GPU instance id", "1, 2, … in order"),
        "placement": Key(Int(0, 7), "first memory slice", "first free"),
        "memory_used": Key(PatternOf("size"), "memory in use", "sum of its processes"),
        "load": Key(LOAD, "load of the GPU instance (GPM via nvmlGpmMigSampleGet)", "idle"),
        "compute_instances": Key(
            Seq(COMPUTE_INSTANCE, min_len=1),
            "compute instances (MIG devices)",
            "one covering the instance",
        ),
    },
    expected="a GPU instance mapping",
)


MIG = Map(
    {
        "enabled": Key(Bool(), "current MIG mode", "false"),
        "pending": Key(Bool(), "MIG mode after reset", "enabled"),
        "instances": Key(Seq(GPU_INSTANCE), "GPU instances", "none"),
    }
)
PROCESS = Map(
    {
        "pid": Key(Int(1, 2**31), "process id", required=True),
        "name": Key(Str(), "process name (nvmlSystemGetProcessName)", "process-PID"),
        "type": Key(
            Enum({t: t for t in PROCESS_TYPES}),
            "compute, graphics, compute+graphics or mps",
            "compute",
        ),
        "memory": Key(PatternOf("size"), "GPU memory used", "0"),
        "utilization": Key(
            Map({k: Key(PatternOf(RATIO)) for k in ("sm", "memory", "encoder", "decoder")}),
            "per-process utilization samples",
            "GPU utilization shared by processes without their own",
        ),
        "start": Key(Unit("duration", lo=0), "scenario time it appears", "0s"),
        "stop": Key(Unit("duration", lo=0), "scenario time it exits", "never"),
        "gpu_instance": Key(Int(lo=0), "GPU instance id (MIG only)"),
        "compute_instance": Key(Int(lo=0), "compute instance id (MIG only)", "0"),
    },
    expected="a process mapping",
)
XID_EVENT = Map(
    {
        "at": Key(Unit("duration", lo=0), "scenario time", required=True),
        "xid": Key(Int(0, 2**31), "Xid number (eventData)", required=True),
        "gpu_instance": Key(Int(lo=0), "MIG attribution"),
        "compute_instance": Key(Int(lo=0), "MIG attribution"),
    }
)


def _check_gpu(d: dict[str, Any], node: yaml.Node, path: str, ctx: Ctx) -> None:
    if d.get("count", 1) > 1:
        for key in ("uuid", "serial", "pci_bus_id", "minor_number"):
            if key in d:
                raise ctx.error_at(
                    join(path, key), "cannot be combined with count > 1 (each copy needs its own)"
                )


_GPU_KEYS: list[tuple[str, Key]] = [
    ("count", Key(Int(1, 64), "replicate this entry N times", "1")),
    ("model", Key(Enum({m: m for m in MODELS}), "preset: " + ", ".join(MODELS), "none")),
    ("name", Key(Str(), "product name", "from model")),
    (
        "uuid",
        Key(
            Str('a UUID like "GPU-…"', lambda s: s.startswith("GPU-")), "", "derived from the seed"
        ),
    ),
    ("serial", Key(Str(), "board serial", "derived from the seed")),
    (
        "pci_bus_id",
        Key(Str('a PCI bus id like "00000000:18:00.0"', _pci), "", "00000000:BB:00.0 by index"),
    ),
    ("pci_device_id", Key(Int(lo=0), "device id << 16 | vendor id", "from model")),
    ("pci_subsystem_id", Key(Int(lo=0), "", "from model")),
    ("minor_number", Key(Int(lo=0), "/dev/nvidiaN", "index")),
    (
        "architecture",
        Key(Enum(ARCHITECTURES, allow_values=True), ", ".join(ARCHITECTURES), "from model"),
    ),
    ("brand", Key(Enum(BRANDS, allow_values=True), "NVML brand name, e.g. nvidia", "nvidia")),
    ("compute_capability", Key(Str('"major.minor", e.g. "9.0"', _cc), "", "from model")),
    ("sm_count", Key(Int(1, MAX_SM_COUNT), "streaming multiprocessors", "from model")),
    ("vbios_version", Key(Str(), "", "from model")),
    ("board_part_number", Key(Str(), "", "from model")),
    (
        "virtualization_mode",
        Key(Enum(VIRTUALIZATION_MODES), ", ".join(VIRTUALIZATION_MODES), "none"),
    ),
    ("persistence_mode", Key(Bool(), "", "true")),
    ("compute_mode", Key(Enum(COMPUTE_MODES), ", ".join(COMPUTE_MODES), "default")),
    ("memory", Key(MEMORY, "see below")),
    ("load", Key(LOAD, "see below (not with MIG enabled: put load on the GPU instances)", "idle")),
    ("power", Key(POWER, "see below")),
    ("temperature", Key(TEMPERATURE, "see below")),
    ("clocks", Key(CLOCKS, "see below")),
    ("clock_event_reasons", Key(CLOCK_EVENT_REASONS, "see below")),
    ("performance_state", Key(PatternOf("number", 0, 32), "P-state (0 = max, 32 = unknown)", "0")),
    ("fans", Key(FANS, "see below")),
    ("ecc", Key(ECC, "see below")),
    ("remapped_rows", Key(REMAPPED_ROWS, "see below")),
    ("pcie", Key(PCIE, "see below")),
    (
        "nvlink_links",
        Key(Int(0, 18), "NVLink links (0: NVLink fields are not supported)", "from model or 0"),
    ),
    (
        "nvlink",
        Key(
            NVLINK,
            "per-link NVLink state, traffic and errors (an HGX board); without it the per-link "
            "fields answer not supported",
            "none",
        ),
    ),
    ("gpm", Key(Bool(), "GPM supported (Hopper+)", "from model")),
    ("supported_event_types", Key(Int(lo=0), "nvmlDeviceGetSupportedEventTypes mask", "0xFF9F")),
    ("mig_profiles", Key(Seq(MIG_PROFILE), "GPU-instance profile table", "from model")),
    ("mig", Key(MIG, "see below", "disabled")),
    ("processes", Key(Seq(PROCESS), "see below", "none")),
    ("xid_events", Key(Seq(XID_EVENT), "Xid errors delivered through event sets", "none")),
    (
        "unsupported",
        Key(
            Seq(Str("a pynvml function name"), one_or_many=True),
            "functions that raise NOT_SUPPORTED (3) on this GPU",
            "none",
        ),
    ),
]
for _name, _key in _GPU_KEYS:
    GPU.register(_name, _key)
CORE_GPU_KEYS = frozenset(name for name, _ in _GPU_KEYS)

GPU_ENTRY = Map(GPU, expected="a GPU mapping", check=_check_gpu)


class _CudaVersion(Type):
    expected = 'a CUDA driver version like 13000 or "13.0"'

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> int:
        value = self.scalar(node, path, ctx)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        if isinstance(value, (str, float)) and not isinstance(value, bool):
            parts = str(value).split(".")
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                return int(parts[0]) * 1000 + int(parts[1]) * 10
        raise self.fail(node, path, ctx)


DRIVER = Map(
    {
        "version": Key(Str(), "driver version", DEFAULT_DRIVER_VERSION),
        "nvml_version": Key(
            Str(), "NVML version", "CUDA major + driver version, e.g. 13.580.159.04"
        ),
        "cuda_driver_version": Key(_CudaVersion(), '13000 or "13.0"', "13000"),
        "branch": Key(
            Str(), "nvmlSystemGetDriverBranch", "r582_49 for the default driver, else rMAJOR_00"
        ),
        "gpm_max_metric_id": Key(
            Int(1, 477), "GPM metric ids at or above this fail per metric with 2", "210 (R575–R590)"
        ),
    }
)


class _LatencyMap(Type):
    expected = "a mapping of pynvml function name to duration"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> dict[str, float]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, ctx)
        out: dict[str, float] = {}
        for key_node, value_node in node.value:
            name = Str().parse(key_node, path, ctx)
            key_path = join(path, name)
            if not registry.is_pynvml_function(name):
                raise ctx.error(key_node, key_path, f"{name!r} is not a pynvml function")
            out[name] = Unit("duration", lo=0).parse(value_node, key_path, ctx)
        return out


LATENCY = OneOf(
    (yaml.ScalarNode, Enum({"none": "none", "realistic": "realistic"})),
    (yaml.MappingNode, _LatencyMap()),
    expected='"none", "realistic" or a mapping of function name to duration',
)

_TOP_KEYS: list[tuple[str, Key]] = [
    ("name", Key(Str(), "scenario name", "file name without .yaml")),
    ("description", Key(Str(), "one line shown by `vgpumon scenarios`", '""')),
    ("seed", Key(Int(lo=0), "seed for identities and noise", "0")),
    (
        "privileged",
        Key(Bool(), "run as root: MIG GI/CI enumeration and MIG parent aggregates work", "true"),
    ),
    (
        "latency",
        Key(
            LATENCY,
            'per-call delay: "none", "realistic" (H200 medians), or {function: duration}',
            "none",
        ),
    ),
    ("driver", Key(DRIVER, "see below")),
    ("gpus", Key(Seq(GPU_ENTRY, min_len=1), "the GPUs, in NVML index order", required=True)),
]
for _name, _key in _TOP_KEYS:
    TOP_LEVEL.register(_name, _key)
CORE_TOP_KEYS = frozenset(name for name, _ in _TOP_KEYS) | {"faults"}

DOCUMENT = Map(TOP_LEVEL, expected="a scenario mapping")

# --------------------------------------------------------------------------- parsed objects


@dataclass(frozen=True)
class DriverSpec:
    version: str = DEFAULT_DRIVER_VERSION
    nvml_version: str = "13.580.159.04"
    cuda_driver_version: int = 13000
    branch: str = "r582_49"
    gpm_max_metric_id: int = 210


@dataclass(frozen=True)
class MigProfile:
    index: int
    id: int
    name: str  # without "MIG "
    slices: int
    instances: int
    sm_count: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int
    memory_bytes: int
    placements: tuple[tuple[int, int], ...]

    @property
    def memory_mb(self) -> int:
        return self.memory_bytes // MIB


@dataclass(frozen=True)
class ComputeInstanceSpec:
    id: int
    slices: int
    placement: int
    mig_index: int
    uuid: str
    load: dict[str, PatternSpec] | None = None


@dataclass(frozen=True)
class GpuInstanceSpec:
    id: int
    profile: MigProfile
    placement: int
    path: str
    compute_instances: tuple[ComputeInstanceSpec, ...]
    memory_used: PatternSpec | None = None
    load: dict[str, PatternSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessSpec:
    pid: int
    name: str
    kind: str
    memory: PatternSpec
    utilization: dict[str, PatternSpec]
    start: float = 0.0
    stop: float | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None

    def running(self, t: float) -> bool:
        return self.start <= t and (self.stop is None or t < self.stop)


@dataclass(frozen=True)
class XidSpec:
    at: float
    xid: int
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True)
class GpuSpec:
    """One simulated GPU, after its model preset and defaults were applied."""

    index: int
    path: str
    model: str | None
    name: str
    uuid: str
    serial: str
    pci_bus_id: str
    pci_device_id: int
    pci_subsystem_id: int
    minor_number: int
    architecture: int
    brand: int
    compute_capability: tuple[int, int]
    sm_count: int
    vbios_version: str
    board_part_number: str
    virtualization_mode: int
    persistence_mode: bool
    compute_mode: int
    memory_total: int
    memory_reserved: int
    memory_used: PatternSpec | None
    bar1_total: int
    bar1_used: PatternSpec
    load: dict[str, PatternSpec]
    power_draw: PatternSpec | None
    power_idle: float
    power_max_draw: float
    power_limit: float
    power_default_limit: float
    power_min_limit: float
    power_max_limit: float
    power_enforced_limit: float
    temp_gpu: PatternSpec | None
    temp_memory: PatternSpec | None
    temp_idle: float
    temp_load: float
    temp_thresholds: dict[str, float]
    clocks_max: dict[str, float]
    clocks_idle: dict[str, float]
    clocks_current: dict[str, PatternSpec]
    clock_reasons_supported: int
    clock_reasons_active: int | None
    performance_state: PatternSpec
    fan_count: int
    fan_speed: PatternSpec
    ecc_supported: bool
    ecc_enabled: bool
    ecc_pending: bool
    ecc_counts: dict[str, int]
    remapped_rows: tuple[int, int, int, int]
    row_histogram: tuple[int, int, int, int, int]
    pcie: dict[str, int]
    nvlink_links: int
    # the "nvlink" mapping as parsed ({} when absent: per-link fields not supported)
    nvlink: dict[str, Any]
    gpm_supported: bool
    supported_event_types: int
    mig_profiles: tuple[MigProfile, ...]
    mig_enabled: bool
    mig_pending: bool
    gpu_instances: tuple[GpuInstanceSpec, ...]
    processes: tuple[ProcessSpec, ...]
    xid_events: tuple[XidSpec, ...]
    unsupported: frozenset[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    privileged: bool
    driver: DriverSpec
    gpus: tuple[GpuSpec, ...]
    faults: tuple[FaultSpec, ...]
    latency: dict[str, float]
    source: str  # "builtin:NAME" or a file path
    text: str  # the YAML as written
    extra: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- building


def _hex(seed: int, *salt: object, digits: int) -> str:
    data = "|".join(str(s) for s in (seed, *salt)).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()[:digits]


def derived_uuid(prefix: str, seed: int, *salt: object) -> str:
    h = _hex(seed, *salt, digits=32)
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def derived_serial(seed: int, index: int) -> str:
    digits = str(int(_hex(seed, "serial", index, digits=16), 16))
    return ("1" + digits)[:13]


# Bus numbers of an 8-GPU HGX board, then a simple sequence for larger hosts.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


# Beyond eight GPUs: the free bus numbers from 0x10 up (0x10 + index collided with the HGX ones).
_MORE_BUSES = tuple(b for b in range(0x10, 0x100) if b not in _HGX_BUSES)


def derived_bus_id(index: int) -> str:
    if index < len(_HGX_BUSES):
        bus = _HGX_BUSES[index]
    else:
        bus = _MORE_BUSES[(index - len(_HGX_BUSES)) % len(_MORE_BUSES)]
    return f"00000000:{bus:02X}:00.0"


def normalized_bus_id(value: str) -> str:
    parsed = _parse_bus_id(value)
    if parsed is None:
        raise ValueError(value)
    domain, bus, device, fn = parsed
    return f"{domain:08X}:{bus:02X}:{device:02X}.{fn:X}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


_PRESETS: dict[str, dict[str, Any]] = {}


def preset(model: str) -> dict[str, Any]:
    """A model preset as parsed scenario data (parsed once, through the GPU schema)."""
    if model not in _PRESETS:
        ctx = Ctx(f"(model {model})")
        _PRESETS[model] = GPU_ENTRY.parse(node_of(MODELS[model]), "model", ctx)
    return _PRESETS[model]


def _profile(d: dict[str, Any]) -> MigProfile:
    return MigProfile(
        index=d["index"],
        id=d["id"],
        name=d["name"][4:] if d["name"].startswith("MIG ") else d["name"],
        slices=d["slices"],
        instances=d["instances"],
        sm_count=d["sm_count"],
        copy_engines=d.get("copy_engines", 0),
        decoders=d.get("decoders", 0),
        encoders=d.get("encoders", 0),
        jpeg=d.get("jpeg", 0),
        ofa=d.get("ofa", 0),
        memory_bytes=d["memory"],
        placements=tuple((p[0], p[1]) for p in d["placements"]),
    )


def ci_placements(gi_slices: int, ci_slices: int) -> list[int]:
    """Where a compute instance of ``ci_slices`` may start inside a GPU instance."""
    if ci_slices == gi_slices:
        return [0]
    if ci_slices > gi_slices or not (
        ci_slices in (1, 2) or (gi_slices == 7 and ci_slices in (3, 4))
    ):
        return []
    return list(range(0, gi_slices - ci_slices + 1, ci_slices))


def ci_name(gi: MigProfile, slices: int) -> str:
    return gi.name if slices == gi.slices else f"{slices}c.{gi.name}"


def _find_profile(profiles: tuple[MigProfile, ...], ref: str | int) -> MigProfile | None:
    for p in profiles:
        if isinstance(ref, int) and p.id == ref:
            return p
        if isinstance(ref, str):
            name = ref[4:] if ref.startswith("MIG ") else ref
            if p.name == name:
                return p
    return None


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _claim(
    wanted: int | None,
    used: set[int],
    first: int,
    ctx: Ctx,
    path: str,
    what: str,
    reserved: Collection[int | None] = (),
) -> int:
    """An id for a new entry: ``wanted`` unless another entry has it, else (when none is given)
    the lowest from ``first`` that is neither used nor ``reserved`` for a later entry."""
    if wanted is None:
        wanted = first
        while wanted in used or wanted in reserved:
            wanted += 1
    elif wanted in used:
        raise ctx.error_at(path, f"{what} {wanted} is used twice")
    used.add(wanted)
    return wanted


def _build_mig(
    d: dict[str, Any], profiles: tuple[MigProfile, ...], seed: int, index: int, path: str, ctx: Ctx
) -> tuple[GpuInstanceSpec, ...]:
    taken: list[tuple[int, int]] = []
    used_ids: set[int] = set()
    used_mig_indexes: set[int] = set()
    compute_slices = 0
    wanted_indexes = [
        c.get("mig_index")
        for raw_gi in d.get("instances", [])
        for c in raw_gi.get("compute_instances", [])
        if isinstance(c, dict) and "mig_index" in c
    ]
    gis: list[GpuInstanceSpec] = []
    for i, g in enumerate(d.get("instances", [])):
        gpath = f"{path}.mig.instances[{i}]"
        profile = _find_profile(profiles, g["profile"])
        if profile is None:
            names = ", ".join(p.name for p in profiles)
            raise ctx.error_at(
                join(gpath, "profile"), f"unknown profile {g['profile']!r}; this GPU has: {names}"
            )
        same = sum(1 for gi in gis if gi.profile.id == profile.id)
        if same >= profile.instances:
            raise ctx.error_at(
                join(gpath, "profile"), f"at most {profile.instances} instances of {profile.name}"
            )
        if "placement" in g:
            placement = next((p for p in profile.placements if p[0] == g["placement"]), None)
            if placement is None:
                options = ", ".join(str(p[0]) for p in profile.placements)
                raise ctx.error_at(
                    join(gpath, "placement"), f"{profile.name} can start at slice {options}"
                )
            if any(_overlaps(placement, t) for t in taken):
                raise ctx.error_at(join(gpath, "placement"), "overlaps another GPU instance")
        else:
            placement = next(
                (p for p in profile.placements if not any(_overlaps(p, t) for t in taken)), None
            )
            if placement is None:
                raise ctx.error_at(
                    join(gpath, "profile"), f"no free placement left for {profile.name}"
                )
        taken.append(placement)
        compute_slices += profile.slices
        if compute_slices > 7:
            raise ctx.error_at(
                join(gpath, "profile"), "the GPU instances need more than 7 compute slices"
            )
        gi_id = _claim(g.get("id"), used_ids, 1, ctx, join(gpath, "id"), "GPU instance id")
        cis = []
        ci_taken: list[tuple[int, int]] = []
        ci_ids: set[int] = set()
        raw_cis = g.get("compute_instances", [profile.slices])
        for j, c in enumerate(raw_cis):
            cpath = f"{gpath}.compute_instances[{j}]"
            c = {"slices": c} if isinstance(c, int) else c
            slices = c.get("slices", profile.slices)
            starts = ci_placements(profile.slices, slices)
            if not starts:
                raise ctx.error_at(
                    cpath,
                    f"a {slices}-slice compute instance does not fit a {profile.name} instance",
                )
            if "placement" in c:
                # An explicit start is trusted when it fits (recorded layouts come from real
                # drivers); the aligned starts are only what the simulator offers by itself.
                if c["placement"] + slices > profile.slices:
                    raise ctx.error_at(
                        join(cpath, "placement"),
                        f"a {slices}-slice compute instance starting at {c['placement']} "
                        f"does not fit in {profile.slices} slices",
                    )
                start = c["placement"]
                if any(_overlaps((start, slices), t) for t in ci_taken):
                    raise ctx.error_at(
                        join(cpath, "placement"), "overlaps another compute instance"
                    )
            else:
                free = [s for s in starts if not any(_overlaps((s, slices), t) for t in ci_taken)]
                if not free:
                    raise ctx.error_at(
                        cpath, f"no free compute slices left in {profile.name} instance {gi_id}"
                    )
                start = free[0]
            ci_taken.append((start, slices))
            ci_id = _claim(c.get("id"), ci_ids, 0, ctx, join(cpath, "id"), "compute instance id")
            mig_index = _claim(
                c.get("mig_index"),
                used_mig_indexes,
                0,
                ctx,
                join(cpath, "mig_index"),
                "MIG device index",
                reserved=wanted_indexes,
            )
            cis.append(
                ComputeInstanceSpec(
                    id=ci_id,
                    slices=slices,
                    placement=start,
                    mig_index=mig_index,
                    uuid=c.get("uuid") or derived_uuid("MIG", seed, "mig", index, gi_id, ci_id),
                    load=c.get("load"),
                )
            )
        gis.append(
            GpuInstanceSpec(
                id=gi_id,
                profile=profile,
                placement=placement[0],
                path=gpath,
                compute_instances=tuple(cis),
                memory_used=g.get("memory_used"),
                load=g.get("load", {}),
            )
        )
    if len(used_mig_indexes) > MAX_MIG_DEVICES or any(
        i >= MAX_MIG_DEVICES for i in used_mig_indexes
    ):
        raise ctx.error_at(
            f"{path}.mig.instances", f"at most {MAX_MIG_DEVICES} MIG devices, indexed 0–6"
        )
    return tuple(gis)


def _build_gpu(merged: dict[str, Any], index: int, path: str, seed: int, ctx: Ctx) -> GpuSpec:
    model = merged.get("model")
    memory = merged.get("memory", {})
    power = merged.get("power", {})
    temperature = merged.get("temperature", {})
    clocks = merged.get("clocks", {})
    reasons = merged.get("clock_event_reasons", {})
    fans = merged.get("fans", {})
    ecc = merged.get("ecc", {})
    rows = merged.get("remapped_rows", {})
    pcie = merged.get("pcie", {})
    mig = merged.get("mig", {})

    if "total" not in memory:
        raise ctx.error_at(f"{path}.memory.total", "required (or set a model)")
    for key in ("name", "architecture", "sm_count"):
        if key not in merged:
            raise ctx.error_at(join(path, key), "required (or set a model)")
    if "limit" not in power:
        raise ctx.error_at(f"{path}.power.limit", "required (or set a model)")
    if "max" not in clocks:
        raise ctx.error_at(f"{path}.clocks.max", "required (or set a model)")
    clocks_max = {
        k: float(clocks["max"].get(k, 0.0)) for k in ("graphics", "sm", "memory", "video")
    }
    clocks_idle = {
        k: float(clocks.get("idle", clocks["max"]).get(k, clocks_max[k])) for k in clocks_max
    }

    profiles = tuple(_profile(p) for p in merged.get("mig_profiles", []))
    mig_enabled = bool(mig.get("enabled", False))
    if (mig_enabled or mig.get("pending") or mig.get("instances")) and not profiles:
        raise ctx.error_at(
            f"{path}.mig", "this GPU has no MIG profiles (use a MIG-capable model or mig_profiles)"
        )
    if mig.get("instances") and not mig_enabled:
        raise ctx.error_at(f"{path}.mig.instances", "GPU instances need mig.enabled: true")
    gis = _build_mig(mig, profiles, seed, index, path, ctx) if mig_enabled else ()
    if mig_enabled and "load" in merged:
        raise ctx.error_at(
            join(path, "load"), "not allowed with MIG enabled; put load on the GPU instances"
        )

    cc = merged.get("compute_capability", "0.0").split(".")
    limit = float(power["limit"])
    processes = []
    seen_pids: set[int] = set()
    for i, p in enumerate(merged.get("processes", [])):
        ppath = f"{path}.processes[{i}]"
        if p["pid"] in seen_pids:
            raise ctx.error_at(join(ppath, "pid"), f"pid {p['pid']} appears twice on this GPU")
        seen_pids.add(p["pid"])
        gi_id, ci_id = p.get("gpu_instance"), p.get("compute_instance")
        if mig_enabled:
            if gi_id is None:
                raise ctx.error_at(ppath, "with MIG enabled a process needs gpu_instance")
            gi = next((g for g in gis if g.id == gi_id), None)
            if gi is None:
                raise ctx.error_at(join(ppath, "gpu_instance"), f"no GPU instance {gi_id}")
            ci_id = 0 if ci_id is None else ci_id
            if not any(c.id == ci_id for c in gi.compute_instances):
                raise ctx.error_at(
                    join(ppath, "compute_instance"),
                    f"no compute instance {ci_id} in GPU instance {gi_id}",
                )
        elif gi_id is not None or ci_id is not None:
            key = "gpu_instance" if gi_id is not None else "compute_instance"
            raise ctx.error_at(join(ppath, key), "only for GPUs with MIG enabled")
        if "stop" in p and p["stop"] <= p.get("start", 0.0):
            raise ctx.error_at(join(ppath, "stop"), "must be later than start")
        processes.append(
            ProcessSpec(
                pid=p["pid"],
                name=p.get("name", f"process-{p['pid']}"),
                kind=p.get("type", "compute"),
                memory=p.get("memory", PatternSpec.constant(0)),
                utilization=p.get("utilization", {}),
                start=p.get("start", 0.0),
                stop=p.get("stop"),
                gpu_instance=gi_id,
                compute_instance=ci_id,
            )
        )
    xids = []
    for i, x in enumerate(merged.get("xid_events", [])):
        if "gpu_instance" in x and not any(g.id == x["gpu_instance"] for g in gis):
            raise ctx.error_at(
                f"{path}.xid_events[{i}].gpu_instance", f"no GPU instance {x['gpu_instance']}"
            )
        xids.append(XidSpec(x["at"], x["xid"], x.get("gpu_instance"), x.get("compute_instance")))
    unsupported = merged.get("unsupported", [])
    for i, name in enumerate(unsupported):
        if not registry.is_pynvml_function(name):
            raise ctx.error_at(f"{path}.unsupported[{i}]", f"{name!r} is not a pynvml function")
    hist = rows.get("histogram", {})
    ecc_enabled = bool(ecc.get("enabled", True))
    return GpuSpec(
        index=index,
        path=path,
        model=model,
        name=merged["name"],
        uuid=merged.get("uuid") or derived_uuid("GPU", seed, "gpu", index),
        serial=merged.get("serial") or derived_serial(seed, index),
        pci_bus_id=normalized_bus_id(merged["pci_bus_id"])
        if "pci_bus_id" in merged
        else derived_bus_id(index),
        pci_device_id=merged.get("pci_device_id", 0x10DE),
        pci_subsystem_id=merged.get("pci_subsystem_id", 0),
        minor_number=merged.get("minor_number", index),
        architecture=merged["architecture"],
        brand=merged.get("brand", BRANDS["nvidia"]),
        compute_capability=(int(cc[0]), int(cc[1])),
        sm_count=merged["sm_count"],
        vbios_version=merged.get("vbios_version", "96.00.00.00.01"),
        board_part_number=merged.get("board_part_number", "000-00000-0000-000"),
        virtualization_mode=merged.get("virtualization_mode", 0),
        persistence_mode=merged.get("persistence_mode", True),
        compute_mode=merged.get("compute_mode", 0),
        memory_total=memory["total"],
        memory_reserved=memory.get("reserved", 0),
        memory_used=memory.get("used"),
        bar1_total=memory.get("bar1_total", 256 * MIB),
        bar1_used=memory.get("bar1_used", PatternSpec.constant(3 * MIB)),
        load=merged.get("load", {}),
        power_draw=power.get("draw"),
        power_idle=float(power.get("idle", limit * 0.1)),
        power_max_draw=float(power.get("max_draw", limit * 0.95)),
        power_limit=limit,
        power_default_limit=float(power.get("default_limit", limit)),
        power_min_limit=float(power.get("min_limit", limit)),
        power_max_limit=float(power.get("max_limit", limit)),
        power_enforced_limit=float(power.get("enforced_limit", limit)),
        temp_gpu=temperature.get("gpu"),
        temp_memory=temperature.get("memory"),
        temp_idle=float(temperature.get("idle", 30.0)),
        temp_load=float(temperature.get("load", 70.0)),
        temp_thresholds={
            "shutdown": float(temperature.get("shutdown", 92.0)),
            "slowdown": float(temperature.get("slowdown", 89.0)),
            "gpu_max": float(temperature.get("gpu_max", 87.0)),
            "memory_max": float(temperature.get("memory_max", 95.0)),
        },
        clocks_max=clocks_max,
        clocks_idle=clocks_idle,
        clocks_current=clocks.get("current", {}),
        clock_reasons_supported=reasons.get("supported", 0x1FF),
        clock_reasons_active=reasons.get("active"),
        performance_state=merged.get("performance_state", PatternSpec.constant(0)),
        fan_count=fans.get("count", 0),
        fan_speed=fans.get("speed", PatternSpec.constant(0.3)),
        ecc_supported=bool(ecc.get("supported", True)),
        ecc_enabled=ecc_enabled,
        ecc_pending=bool(ecc.get("pending", ecc_enabled)),
        ecc_counts={
            k: int(ecc.get(k, 0))
            for k in (
                "corrected_volatile",
                "uncorrected_volatile",
                "corrected_aggregate",
                "uncorrected_aggregate",
            )
        },
        remapped_rows=(
            int(rows.get("correctable", 0)),
            int(rows.get("uncorrectable", 0)),
            int(bool(rows.get("pending", False))),
            int(bool(rows.get("failed", False))),
        ),
        row_histogram=(
            hist.get("max", 3072),
            hist.get("high", 0),
            hist.get("partial", 0),
            hist.get("low", 0),
            hist.get("none", 0),
        ),
        pcie={
            "generation": pcie.get("generation", 4),
            "width": pcie.get("width", 16),
            "max_generation": pcie.get("max_generation", pcie.get("generation", 4)),
            "max_width": pcie.get("max_width", pcie.get("width", 16)),
            "replay_counter": pcie.get("replay_counter", 0),
        },
        nvlink_links=merged.get("nvlink_links", 0),
        nvlink=dict(merged.get("nvlink", {})),
        gpm_supported=bool(merged.get("gpm", merged["architecture"] >= ARCHITECTURES["hopper"])),
        supported_event_types=merged.get("supported_event_types", pynvml.nvmlEventTypeAll),
        mig_profiles=profiles,
        mig_enabled=mig_enabled,
        mig_pending=bool(mig.get("pending", mig_enabled)),
        gpu_instances=gis,
        processes=tuple(processes),
        xid_events=tuple(sorted(xids, key=lambda x: x.at)),
        unsupported=frozenset(unsupported),
        extra={k: v for k, v in merged.items() if k not in CORE_GPU_KEYS},
    )


def build_scenario(
    doc: dict[str, Any], ctx: Ctx, default_name: str, source: str, text: str
) -> Scenario:
    seed = doc.get("seed", 0)
    gpus: list[GpuSpec] = []
    for i, entry in enumerate(doc["gpus"]):
        path = f"gpus[{i}]"
        merged = _merge(preset(entry["model"]), entry) if "model" in entry else entry
        for _ in range(entry.get("count", 1)):
            gpus.append(_build_gpu(merged, len(gpus), path, seed, ctx))
    for key, label in (("uuid", "UUID"), ("pci_bus_id", "PCI bus id"), ("serial", "serial")):
        seen: dict[str, int] = {}
        for g in gpus:
            value = getattr(g, key)
            if value in seen:
                raise ctx.error_at(
                    join(g.path, key), f"{label} {value} is used by GPU {seen[value]} too"
                )
            seen[value] = g.index
    raw_driver = doc.get("driver", {})
    version = raw_driver.get("version", DEFAULT_DRIVER_VERSION)
    cuda = raw_driver.get("cuda_driver_version", 13000)
    driver = DriverSpec(
        version=version,
        nvml_version=raw_driver.get("nvml_version", f"{cuda // 1000}.{version}"),
        cuda_driver_version=cuda,
        branch=raw_driver.get(
            "branch",
            "r582_49" if version == DEFAULT_DRIVER_VERSION else f"r{version.split('.')[0]}_00",
        ),
        gpm_max_metric_id=raw_driver.get("gpm_max_metric_id", 210),
    )
    latency = doc.get("latency", "none")
    if latency == "none":
        latency = {}
    elif latency == "realistic":
        latency = dict(REALISTIC_LATENCY)
    scenario = Scenario(
        name=doc.get("name", default_name),
        description=doc.get("description", ""),
        seed=seed,
        privileged=doc.get("privileged", True),
        driver=driver,
        gpus=tuple(gpus),
        faults=tuple(build_faults(doc.get("faults", []), len(gpus), ctx)),
        latency=latency,
        source=source,
        text=text,
        extra={k: v for k, v in doc.items() if k not in CORE_TOP_KEYS},
        lines=dict(ctx.lines),
    )
    for check in registry.SCENARIO_CHECKS:
        check(scenario, ctx)
    return scenario


# --------------------------------------------------------------------------- loading

_BUILTIN_PACKAGE = "vgpumon.sim"


def _builtin_dir() -> Any:
    return resources.files(_BUILTIN_PACKAGE).joinpath("scenarios")


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    if name not in builtin_names():
        known = ", ".join(builtin_names())
        raise ConfigError(f"unknown built-in scenario {name!r}; built-in scenarios: {known}")
    return str(_builtin_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))


def builtin_scenarios() -> dict[str, str]:
    """name -> one-line description, sorted by name."""
    out = {}
    for name in builtin_names():
        try:
            data = yaml.safe_load(builtin_text(name)) or {}
        except yaml.YAMLError:
            data = {}
        description = str(data.get("description", "")).strip().splitlines()
        out[name] = description[0] if description else ""
    return out


def parse_scenario(text: str, label: str = "<string>", source: str | None = None) -> Scenario:
    """A scenario from YAML text; ``label`` names it in error messages."""
    registry.load_modules()
    ctx = Ctx(label)
    doc = DOCUMENT.parse(compose(text, label), "", ctx)
    default_name = label[:-5] if label.endswith(".yaml") else label
    return build_scenario(doc, ctx, default_name, source or label, text)


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario file by path."""
    if name_or_path in builtin_names():
        return parse_scenario(
            builtin_text(name_or_path), f"{name_or_path}.yaml", f"builtin:{name_or_path}"
        )
    if "\0" in name_or_path or os.path.lexists(name_or_path):
        # Regular files only, size cap, UTF-8: the shared hardened reader.
        text = yamlfile.read_text(name_or_path, "scenario", yamlfile.SCENARIO_MAX_BYTES)
        return parse_scenario(text, os.path.basename(name_or_path), name_or_path)
    known = ", ".join(builtin_names())
    raise ConfigError(
        f"unknown scenario {name_or_path!r}: not a built-in ({known}) and no such file"
    )
