"""Scenario files: validation messages name key and line; built-ins load; docs cover the schema."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from vgpumon.errors import ConfigError
from vgpumon.sim import builtin_scenarios, load_scenario, parse_scenario, registry, schema
from vgpumon.sim import scenario_keys as scenario_module
from vgpumon.sim.patterns import PatternSpec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"

H100 = "gpus:\n  - model: h100-sxm-80gb\n"

# (YAML, line, key path, fragment of the message)
BAD = [
    (
        "gpus:\n  - model: h100-sxm-80gb\n    memory:\n      total: lots\n",
        4,
        "gpus[0].memory.total",
        'expected a size like "80GiB", got "lots"',
    ),
    (
        "gpus:\n  - model: h100-sxm-80gb\n    memroy: {total: 1GiB}\n",
        3,
        "gpus[0].memroy",
        'unknown key "memroy" in gpus[0] (allowed: ',
    ),
    ("gpu:\n  - model: h100-sxm-80gb\n", 1, "gpu", 'did you mean "gpus"?'),
    ("name: x\n", 1, "gpus", "required key is missing"),
    ("gpus: []\n", 1, "gpus", "expected at least 1 entries"),
    (
        H100 + "    load: {duty: 1.5}\n",
        3,
        "gpus[0].load.duty",
        'expected a fraction in [0, 1] or a percentage like "85%", got 1.5',
    ),
    (
        H100 + "    load:\n      duty: {pattern: triangle}\n",
        4,
        "gpus[0].load.duty.pattern",
        'got "triangle"',
    ),
    (
        H100 + "    load:\n      duty: {pattern: square, low: 0, high: 1}\n",
        4,
        "gpus[0].load.duty.period",
        "required key is missing",
    ),
    (
        H100 + "    load:\n      duty: {pattern: sine, mean: 0.5, amplitude: 0.1, period: 0s}\n",
        4,
        "gpus[0].load.duty.period",
        "must be greater than zero",
    ),
    (H100 + "    power: {draw: lots}\n", 3, "gpus[0].power.draw", 'expected a power like "700W"'),
    ("gpus:\n  - model: l40s\n    mig: {enabled: true}\n", 3, "gpus[0].mig", "has no MIG profiles"),
    (
        H100 + "    mig:\n      enabled: true\n      instances:\n        - profile: 9g.99gb\n",
        6,
        "gpus[0].mig.instances[0].profile",
        "unknown profile '9g.99gb'",
    ),
    (
        H100 + "    mig:\n      enabled: true\n      instances:\n"
        "        - {profile: 3g.40gb, placement: 0}\n"
        "        - {profile: 2g.20gb, placement: 2}\n",
        7,
        "gpus[0].mig.instances[1].placement",
        "overlaps another GPU instance",
    ),
    (
        H100 + "    mig:\n      enabled: true\n      instances:\n"
        "        - {profile: 1g.10gb, placement: 7}\n",
        6,
        "gpus[0].mig.instances[0].placement",
        "1g.10gb can start at slice 0, 1, 2, 3, 4, 5, 6",
    ),
    (
        H100 + "    mig:\n      enabled: true\n      instances:\n        - profile: 3g.40gb\n"
        "          compute_instances: [4]\n",
        7,
        "gpus[0].mig.instances[0].compute_instances[0]",
        "does not fit",
    ),
    (
        H100 + "    mig:\n      enabled: true\n      instances:\n        - profile: 7g.80gb\n"
        "        - profile: 1g.10gb\n",
        7,
        "gpus[0].mig.instances[1].profile",
        "no free placement left",
    ),
    (
        H100 + "    processes:\n      - {pid: 1, gpu_instance: 1}\n",
        4,
        "gpus[0].processes[0].gpu_instance",
        "only for GPUs with MIG enabled",
    ),
    (
        H100 + "    mig: {enabled: true, instances: [{profile: 7g.80gb}]}\n"
        "    processes:\n      - {pid: 1}\n",
        5,
        "gpus[0].processes[0]",
        "needs gpu_instance",
    ),
    (
        H100 + "    mig: {enabled: true, instances: [{profile: 7g.80gb}]}\n    processes:\n"
        "      - {pid: 1, gpu_instance: 2}\n",
        5,
        "gpus[0].processes[0].gpu_instance",
        "no GPU instance 2",
    ),
    (
        H100 + "    mig: {enabled: true}\n    load: {duty: 0.5}\n",
        4,
        "gpus[0].load",
        "not allowed with MIG enabled",
    ),
    (
        H100 + "    count: 2\n    uuid: GPU-1\n",
        4,
        "gpus[0].uuid",
        "cannot be combined with count > 1",
    ),
    (
        H100 + "    uuid: GPU-1\n  - model: h100-sxm-80gb\n    uuid: GPU-1\n",
        5,
        "gpus[1].uuid",
        "UUID GPU-1 is used by GPU 0 too",
    ),
    (H100 + "    uuid: MIG-1\n", 3, "gpus[0].uuid", 'expected a UUID like "GPU-…", got "MIG-1"'),
    (H100 + "    pci_bus_id: 0000:zz:00.0\n", 3, "gpus[0].pci_bus_id", "expected a PCI bus id"),
    (
        H100 + "    processes:\n      - {pid: 1, start: 5s, stop: 2s}\n",
        4,
        "gpus[0].processes[0].stop",
        "must be later than start",
    ),
    (
        H100 + "    processes:\n      - {pid: 1}\n      - {pid: 1}\n",
        5,
        "gpus[0].processes[1].pid",
        "appears twice",
    ),
    (
        H100 + "    unsupported: [nvmlDeviceGetBogus]\n",
        3,
        "gpus[0].unsupported[0]",
        "'nvmlDeviceGetBogus' is not a pynvml function",
    ),
    ("gpus:\n  - model: h100-sxm-90gb\n", 2, "gpus[0].model", "expected one of h100-sxm-80gb"),
    ("gpus:\n  - memory: {total: 1GiB}\n", 2, "gpus[0].name", "required (or set a model)"),
    (
        "driver: {cuda_driver_version: thirteen}\n" + H100,
        1,
        "driver.cuda_driver_version",
        'expected a CUDA driver version like 13000 or "13.0"',
    ),
    ("latency: {nvmlNope: 1ms}\n" + H100, 1, "latency.nvmlNope", "is not a pynvml function"),
    (
        H100 + "faults:\n  - {kind: error, function: nvmlDeviceGetPowerUsage}\n",
        4,
        "faults[0].code",
        "a 'error' fault needs this key",
    ),
    (
        H100 + "faults:\n  - {kind: gpu_lost, gpus: [5]}\n",
        4,
        "faults[0].gpus",
        "GPU index 5 does not exist (the scenario has 1)",
    ),
    (
        H100 + "faults:\n  - {kind: error, function: nvmlBogus, code: timeout}\n",
        4,
        "faults[0].function",
        "'nvmlBogus' is not a pynvml function",
    ),
    (
        H100 + "faults:\n  - {kind: error, function: '*', code: sleepy}\n",
        4,
        "faults[0].code",
        'expected an NVML error name like "timeout"',
    ),
    (
        H100 + "faults:\n  - {kind: hang, function: '*', code: timeout}\n",
        4,
        "faults[0].code",
        "not used by a 'hang' fault",
    ),
    (
        H100 + "faults:\n  - {kind: gpu_lost, gpus: [0], from: 9s, until: 3s}\n",
        4,
        "faults[0].until",
        "must be later than 'from'",
    ),
    (
        H100 + "    memory: {total: 1GiB}\n    memory: {total: 2GiB}\n",
        4,
        "gpus[0].memory",
        "duplicate key",
    ),
    ("- just\n- a list\n", 1, "", "expected a scenario mapping, got a list"),
]


@pytest.mark.parametrize(("text", "line", "path", "fragment"), BAD)
def test_bad_scenarios_name_key_and_line(text: str, line: int, path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_scenario(text, "foo.yaml")
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"scenario foo.yaml line {line}: {path}: "), message
    assert fragment in message, message


def test_yaml_syntax_errors_and_empty_files() -> None:
    with pytest.raises(ConfigError, match=r"^scenario foo.yaml line 3: invalid YAML: "):
        parse_scenario("gpus:\n  - model: x\n   bad: [\n", "foo.yaml")
    with pytest.raises(ConfigError, match="the file is empty"):
        parse_scenario("# nothing\n", "foo.yaml")


def test_files_and_unknown_names(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(H100 + "    memory: {total: huge}\n")
    with pytest.raises(ConfigError, match=r"^scenario mine.yaml line 3: gpus\[0\].memory.total"):
        load_scenario(str(path))
    path.write_text(H100)
    loaded = load_scenario(str(path))
    assert loaded.name == "mine" and loaded.source == str(path)
    with pytest.raises(ConfigError, match=r"unknown scenario 'nope'.*baremetal-8xh100"):
        load_scenario("nope")


def test_reserved_keys_explain_themselves() -> None:
    keys = schema.KeyRegistry("test")
    keys.register("known", schema.Key(schema.Int()))
    keys.reserve("later", "a feature of a later build")
    node = schema.compose("known: 1\nlater: 2\n", "r.yaml")
    with pytest.raises(ConfigError) as exc:
        schema.Map(keys).parse(node, "", schema.Ctx("r.yaml"))
    assert str(exc.value) == (
        "scenario r.yaml line 2: later: reserved for a feature of a later build, "
        "which this build does not simulate"
    )
    keys.register("later", schema.Key(schema.Int()))  # registering makes it an ordinary key
    assert schema.Map(keys).parse(node, "", schema.Ctx("r.yaml")) == {"known": 1, "later": 2}
    assert {"vgpu", "guest"} <= set(schema.GPU.keys) | set(schema.GPU.reserved)
    assert "vgpu_events" in set(schema.TOP_LEVEL.keys) | set(schema.TOP_LEVEL.reserved)


@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_every_builtin_scenario_loads(name: str) -> None:
    loaded = load_scenario(name)
    assert loaded.name == name
    assert loaded.source == f"builtin:{name}"
    assert builtin_scenarios()[name] == loaded.description.splitlines()[0]


def test_core_builtins_are_present() -> None:
    assert {
        "baremetal-8xh100",
        "a100-mig-mixed",
        "h100-mig-gpm",
        "passthrough-guest",
        "fault-gpu-lost",
        "fault-hang",
        "fault-all-hang-after-start",
        "fault-nvml-errors",
    } <= set(builtin_scenarios())
    assert list(builtin_scenarios()) == sorted(builtin_scenarios())


def test_count_replicates_with_distinct_identities() -> None:
    loaded = parse_scenario(
        "seed: 3\ngpus:\n  - {model: a100-sxm-40gb, count: 3}\n  - model: l40s\n"
    )
    assert [g.index for g in loaded.gpus] == [0, 1, 2, 3]
    assert len({g.uuid for g in loaded.gpus}) == len({g.serial for g in loaded.gpus}) == 4
    assert [g.pci_bus_id for g in loaded.gpus] == [
        "00000000:18:00.0",
        "00000000:2A:00.0",
        "00000000:3A:00.0",
        "00000000:5D:00.0",
    ]
    assert (
        loaded.gpus[0].uuid
        == parse_scenario("seed: 3\ngpus: [{model: a100-sxm-40gb}]").gpus[0].uuid
    )
    assert (
        loaded.gpus[0].uuid
        != parse_scenario("seed: 4\ngpus: [{model: a100-sxm-40gb}]").gpus[0].uuid
    )


def test_explicit_keys_override_the_model() -> None:
    gpu = parse_scenario(
        H100 + "    name: Custom\n    memory: {used: 1GiB}\n    power: {limit: 500W}\n"
        "    clocks: {max: {graphics: 1000}}\n"
    ).gpus[0]
    assert gpu.name == "Custom"
    assert gpu.memory_total == 81559 * 2**20  # from the model, next to the file's "used"
    assert gpu.power_limit == 500.0 and gpu.power_min_limit == 200.0
    assert gpu.clocks_max["graphics"] == 1000.0 and gpu.clocks_max["memory"] == 2619.0


def test_yaml_merge_keys_work() -> None:
    loaded = parse_scenario(
        "gpus:\n  - &b {model: h100-sxm-80gb, load: {duty: 0.5}}\n  - {<<: *b, name: Second}\n"
    )
    assert [g.name for g in loaded.gpus] == ["NVIDIA H100 80GB HBM3", "Second"]
    assert loaded.gpus[1].load["duty"].constant_value() == 0.5


def test_docs_cover_every_key() -> None:
    text = DOCS.read_text(encoding="utf-8")
    documented = set(re.findall(r"`([a-z_0-9]+)`", text))
    maps = {
        "top level": schema.TOP_LEVEL.keys,
        "gpus[]": schema.GPU.keys,
        "driver": scenario_module.DRIVER.keys,
        "memory": scenario_module.MEMORY.keys,
        "load": scenario_module.LOAD.keys,
        "power": scenario_module.POWER.keys,
        "temperature": scenario_module.TEMPERATURE.keys,
        "clocks": scenario_module.CLOCKS.keys,
        "fans": scenario_module.FANS.keys,
        "ecc": scenario_module.ECC.keys,
        "remapped_rows": scenario_module.REMAPPED_ROWS.keys,
        "pcie": scenario_module.PCIE.keys,
        "mig": scenario_module.MIG.keys,
        "mig instance": scenario_module.GPU_INSTANCE.keys,
        "mig profile": scenario_module.MIG_PROFILE.keys,
        "process": scenario_module.PROCESS.keys,
        "xid": scenario_module.XID_EVENT.keys,
    }
    from vgpumon.sim.faults import FAULT

    maps["faults[]"] = FAULT.keys
    core_top = scenario_module.CORE_TOP_KEYS
    core_gpu = scenario_module.CORE_GPU_KEYS
    missing = [
        f"{where}: {key}"
        for where, keys in maps.items()
        for key in keys
        if key not in documented
        and not (where == "top level" and key not in core_top)
        and not (where == "gpus[]" and key not in core_gpu)
    ]
    assert missing == []
    for name in builtin_scenarios():
        if name in ("baremetal-8xh100", "passthrough-guest") or name.startswith(
            ("a100-", "fault-", "h100-mig-gpm")
        ):
            assert f"`{name}`" in text


def test_patterns() -> None:
    square = PatternSpec(
        "square", {"low": 0.0, "high": 1.0, "period": 4.0, "duty": 0.25, "phase": 0.0}
    ).build(0, "s")
    assert [square(t) for t in (0.0, 0.9, 1.0, 3.9, 4.0)] == [1.0, 1.0, 0.0, 0.0, 1.0]
    ramp = PatternSpec(
        "ramp", {"from": 10.0, "to": 20.0, "start": 1.0, "duration": 2.0, "repeat": 0.0}
    ).build(0, "r")
    assert [ramp(t) for t in (0.0, 2.0, 3.0, 9.0)] == [10.0, 15.0, 20.0, 20.0]
    sine = PatternSpec("sine", {"mean": 0.5, "amplitude": 0.7, "period": 4.0, "phase": 0.0}).build(
        0, "x", 0.0, 1.0
    )
    assert sine(1.0) == 1.0 and sine(3.0) == 0.0  # clamped to the quantity's range
    steps = PatternSpec("steps", steps=((0.0, 1.0), (5.0, 2.0))).build(0, "st")
    assert (steps(4.9), steps(5.0)) == (1.0, 2.0)
    noise = PatternSpec("noise", {"mean": 0.5, "amplitude": 0.2, "interval": 1.0})
    a, b = noise.build(7, "n"), noise.build(7, "n")
    samples = [a(t / 10) for t in range(100)]
    assert samples == [b(t / 10) for t in range(100)]
    assert all(0.3 <= v <= 0.7 for v in samples) and len(set(samples)) > 50
    assert samples != [noise.build(8, "n")(t / 10) for t in range(100)]
    assert not any(math.isnan(v) for v in samples)


def test_extension_registries_are_open() -> None:
    # The vGPU simulation plugs in through these without editing the core.
    assert callable(registry.register_provider)
    assert callable(registry.register_gpu_state)
    assert callable(registry.register_scenario_check)
    loaded = parse_scenario(H100)
    assert loaded.extra == {} or set(loaded.extra) <= set(schema.TOP_LEVEL.keys)
