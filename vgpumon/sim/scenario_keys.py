"""The keys a scenario file may hold, declared as data (types, defaults, docs) and registered in
the schema registries; ``docs/scenarios.md`` documents the same tables and a test keeps the two in
step."""

from __future__ import annotations

from typing import Any

import yaml

from vgpumon.nvml import enums
from vgpumon.nvml.enums import codes
from vgpumon.sim import registry
from vgpumon.sim.models import MODELS
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
    join,
)

MIB = 2**20

ARCHITECTURES = codes(enums.ARCHITECTURES)
BRANDS = codes(enums.BRANDS)
VIRTUALIZATION_MODES = codes(enums.VIRTUALIZATION_MODES)
COMPUTE_MODES = codes(enums.COMPUTE_MODES)
CLOCK_REASONS = codes(enums.CLOCK_EVENT_REASONS)
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

# Per-call costs of a real data-center GPU, seconds per call (the measurements and where they
# were taken: docs/nvml-notes.md §14). "*" is every other function (the simple getters).
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
    return parse_bus_id(value) is not None


def parse_bus_id(value: str) -> tuple[int, int, int, int] | None:
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
