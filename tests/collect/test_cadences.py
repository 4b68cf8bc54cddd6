"""Values read at their own cadence: NVML is asked only when one is due, the last value stands.

``vgpumon serve`` reads GPM every 5 s, BAR1 and licenses every 10 s by default (measured costs:
docs/exporter.md). Each test samples a simulated host once a second of scenario time and counts
the NVML calls behind the cadenced values.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vgpumon.collect import (
    gpm,
    health,
    licensing,
    memory,
    mig,
    nvlink,
    pcie,
    power,
    vgpu,
    vgpu_migration,
)
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.device import READERS as DEVICE_READERS
from vgpumon.collect.pcie import FI_DEV_PCIE_REPLAY_COUNTER
from vgpumon.collect.registry import default_cadences
from vgpumon.model import Snapshot
from vgpumon.testing import SimHost, SimHostFactory


def _counting(host: SimHost) -> Counter[str]:
    """Count the calls the sampler makes through its session, by NVML function name."""
    calls: Counter[str] = Counter()
    real = host.session.module

    class Counting:
        def __getattr__(self, name: str) -> Any:
            value = getattr(real, name)
            if not callable(value) or not name.startswith("nvml"):
                return value

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return value(*args, **kwargs)

            return counted

    host.session.module = Counting()
    return calls


async def _run(host: SimHost, seconds: int) -> list[Snapshot]:
    snaps = [await host.cycle()]
    for _ in range(seconds):
        host.advance(1.0)
        snaps.append(await host.cycle())
    return snaps


async def test_gpm_is_sampled_every_five_seconds_and_its_averages_stand_between(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host(
        "h100-mig-gpm",
        [*DEVICE_READERS, *mig.READERS, *gpm.READERS],
        SamplerConfig(cadences={"gpm": 5.0}),
    )
    calls = _counting(host)
    snaps = await _run(host, 12)  # cycles at t = 0 .. 12: reads at 0, 5, 10
    instances = len(snaps[-1].gpus[0].mig_instances)
    assert instances >= 2
    assert calls["nvmlGpmMigSampleGet"] == 3 * instances
    for t, snap in enumerate(snaps):
        read_at = t - t % 5
        gpu = snap.gpus[0]
        assert gpu.gpm == snaps[read_at].gpus[0].gpm, f"t={t}"
        by_id = {gi.id: gi.gpm for gi in snaps[read_at].gpus[0].mig_instances}
        assert {gi.id: gi.gpm for gi in gpu.mig_instances} == by_id, f"t={t}"
    # Averages over 5 s exist from the second read on, for every GPU instance.
    assert all(gi.gpm is not None and gi.gpm.sm_active is not None
               for gi in snaps[5].gpus[0].mig_instances)  # fmt: skip


async def test_gpm_every_cycle_at_a_cadence_of_zero(sim_host: SimHostFactory) -> None:
    host = sim_host(
        "h100-mig-gpm",
        [*DEVICE_READERS, *mig.READERS, *gpm.READERS],
        SamplerConfig(cadences={"gpm": 0}),
    )
    calls = _counting(host)
    snaps = await _run(host, 4)
    assert calls["nvmlGpmMigSampleGet"] == 5 * len(snaps[-1].gpus[0].mig_instances)


async def test_bar1_is_read_every_ten_seconds(sim_host: SimHostFactory) -> None:
    host = sim_host(
        "passthrough-guest",
        [*DEVICE_READERS, *memory.READERS],
        SamplerConfig(cadences={"bar1": 10.0}),
    )
    calls = _counting(host)
    snaps = await _run(host, 12)
    assert calls["nvmlDeviceGetBAR1MemoryInfo"] == 2  # t = 0 and 10
    assert calls["nvmlDeviceGetMemoryInfo"] == len(snaps)  # framebuffer memory: every cycle
    assert snaps[0].gpus[0].bar1_memory is not None
    assert all(s.gpus[0].bar1_memory == snaps[0].gpus[0].bar1_memory for s in snaps[:10])


async def test_guest_licenses_are_read_every_ten_seconds(sim_host: SimHostFactory) -> None:
    host = sim_host(
        "vgpu-guest",
        [*DEVICE_READERS, *licensing.READERS],
        SamplerConfig(cadences={"license": 10.0}),
    )
    calls = _counting(host)
    snaps = await _run(host, 12)
    gpus = len(snaps[0].gpus)
    assert calls["nvmlDeviceGetGridLicensableFeatures"] == 2 * gpus
    for t, snap in enumerate(snaps):
        read_at = t - t % 10
        for gpu, then in zip(snap.gpus, snaps[read_at].gpus, strict=True):
            assert gpu.guest_licenses == then.guest_licenses, f"t={t}"
            assert gpu.guest_licenses, "the scenario's guest has licensed features"


async def test_a_new_vgpu_gets_its_license_at_once_the_others_at_the_cadence(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host(
        "vgpu-churn",
        [*DEVICE_READERS, *vgpu.READERS, *licensing.READERS],
        SamplerConfig(cadences={"license": 10.0}),
    )
    calls = _counting(host)
    snaps = await _run(host, 20)
    seen: set[int] = set()
    new_reads = 0
    for t, snap in enumerate(snaps):
        ids = {v.vgpu_id for g in snap.gpus for v in g.vgpu_instances}
        new_reads += len(ids - seen) if t % 10 else 0
        seen |= ids
        for inst in (v for g in snap.gpus for v in g.vgpu_instances):
            assert inst.license.licensed is not None, f"t={t}: vGPU {inst.vgpu_id} has no license"
    due_reads = sum(len(snaps[t].gpus[0].vgpu_instances) for t in (0, 10, 20))
    info = calls["nvmlVgpuInstanceGetLicenseInfo"] + calls["nvmlVgpuInstanceGetLicenseStatus"]
    assert info == due_reads + new_reads
    assert new_reads > 0, "the scenario starts VMs between the license reads"


async def test_the_pcie_replay_counter_is_asked_every_ten_seconds_outside_the_batch(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host(
        "passthrough-guest",
        [*DEVICE_READERS, *pcie.READERS, *health.READERS],
        SamplerConfig(cadences={"pcie_replay": 10.0}),
    )
    real = host.session.module.nvmlDeviceGetFieldValues
    batches: list[list[Any]] = []

    def recording(handle: Any, ids: list[Any]) -> Any:
        batches.append(list(ids))
        return real(handle, ids)

    host.session.module.nvmlDeviceGetFieldValues = recording
    snaps = await _run(host, 12)
    replay_asks = [ids for ids in batches if FI_DEV_PCIE_REPLAY_COUNTER in ids]
    assert replay_asks == [[FI_DEV_PCIE_REPLAY_COUNTER]] * 2  # t = 0 and 10, alone
    assert all(s.gpus[0].pcie.replay_errors == snaps[0].gpus[0].pcie.replay_errors
               for s in snaps[:10])  # fmt: skip
    assert snaps[0].gpus[0].pcie.replay_errors is not None
    # The ECC counters still come every cycle, in the batch.
    ecc_volatile_corrected = 3  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    assert sum(1 for ids in batches if ecc_volatile_corrected in ids) == len(snaps)


def _nvlink_fields_asked(host: SimHost) -> list[int]:
    """Per cycle and GPU call, how many (TX, link) entries the sampler asked NVML for."""
    asked: list[int] = []
    real = host.session.module.nvmlDeviceGetFieldValues

    def counted(handle: Any, ids: list[Any]) -> Any:
        asked.append(sum(1 for key in ids if isinstance(key, tuple) and key[0] == nvlink.FI_TX))
        return real(handle, ids)

    host.session.module.nvmlDeviceGetFieldValues = counted
    return asked


async def test_nvlink_is_read_at_its_cadence_and_the_last_counters_stand(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host("hgx-8xh100-nvlink", [*DEVICE_READERS, *pcie.READERS],
                    SamplerConfig(cadences={"nvlink": 10.0}))  # fmt: skip
    asked = _nvlink_fields_asked(host)
    snaps = await _run(host, 12)  # cycles at t = 0 .. 12: reads at 0 and 10
    gpus = len(snaps[0].gpus)
    links = len(snaps[0].gpus[0].nvlinks)
    assert links == nvlink.MAX_LINKS
    assert sum(asked) == 2 * gpus * links, "two reads of every link, nothing in between"
    for t, snap in enumerate(snaps):
        read_at = t - t % 10
        assert snap.gpus[0].nvlinks == snaps[read_at].gpus[0].nvlinks, f"t={t}"
    assert snaps[10].gpus[0].nvlinks != snaps[0].gpus[0].nvlinks, "the counters moved"


async def test_nvlink_every_cycle_at_a_cadence_of_zero(sim_host: SimHostFactory) -> None:
    host = sim_host(
        "hgx-8xh100-nvlink", [*DEVICE_READERS, *pcie.READERS], SamplerConfig(cadences={"nvlink": 0})
    )
    asked = _nvlink_fields_asked(host)
    snaps = await _run(host, 3)
    assert sum(asked) == 4 * len(snaps[0].gpus) * nvlink.MAX_LINKS
    assert snaps[1].gpus[0].nvlinks != snaps[0].gpus[0].nvlinks


def _effective(config: SamplerConfig) -> dict[str, float]:
    """How often a sampler with ``config`` reads each cadenced value (0: every cycle)."""
    return {
        name: config.cadences.get(name, seconds) for name, seconds in default_cadences().items()
    }


async def test_a_sampler_configured_with_nothing_reads_at_its_collectors_cadences(
    sim_host: SimHostFactory,
) -> None:
    """Issue 31, finding 3: the cadences' defaults belong to the collectors, so a sampler made
    without cadences (top's, snapshot's, check's) reads as serve does, and says so."""
    readers = [*DEVICE_READERS, *memory.READERS, *power.READERS]
    host = sim_host("passthrough-guest", readers, SamplerConfig())
    calls = _counting(host)
    snaps = await _run(host, 12)  # t = 0 .. 12
    assert calls["nvmlDeviceGetBAR1MemoryInfo"] == 2  # t = 0 and 10, as serve's 10 s default
    assert calls["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert calls["nvmlDeviceGetMemoryInfo"] == len(snaps)  # not cadenced: every cycle
    published = {c.name: c.seconds for c in snaps[-1].health.cadences}
    assert (
        published
        == default_cadences()
        == {
            "bar1": 10.0,
            "energy": 10.0,
            "gpm": 5.0,
            "license": 10.0,
            "migration": 10.0,
            "nvlink": 30.0,
            "pcie_replay": 10.0,
            "pcie_throughput": 10.0,
            "processes": 5.0,
        }
    )


def test_the_commands_that_sample_read_at_the_collectors_cadences() -> None:
    """snapshot, check and top build their samplers without cadences: the collectors' apply.
    validate's in-process sampler reads the two averages it measures at every reading, so that
    its readings tile a step's window (validate --url checks serve's own cadences)."""
    from vgpumon.cli import build_parser
    from vgpumon.commands.snapshot import config_from_args
    from vgpumon.validate.sources import in_process_config

    snapshot = config_from_args(build_parser("snapshot").parse_args(["snapshot", "--sim", "x"]))
    assert _effective(snapshot) == default_cadences()
    assert _effective(SamplerConfig(interval_seconds=2.0)) == default_cadences()
    validate = _effective(in_process_config(0.5))
    assert validate == {**default_cadences(), "gpm": 0.0, "processes": 0.0}


async def test_the_migration_payload_is_read_at_its_cadence_and_a_new_vgpu_at_once(
    sim_host: SimHostFactory,
) -> None:
    """The payload size was read every cycle for every vGPU (768 calls a cycle on a 16 x 48
    host): now every 10 s by default, a VM that just started read at once."""
    readers = [*DEVICE_READERS, *vgpu.READERS, *vgpu_migration.READERS]
    host = sim_host("vgpu-churn", readers, SamplerConfig())
    calls = _counting(host)
    snaps = await _run(host, 12)  # t = 0 .. 12: every vGPU read at 0 and 10
    expected = started = 0
    previous: dict[int, int | None] = {}
    for t, snap in enumerate(snaps):
        sizes = {v.vgpu_id: v.migration_state_bytes for v in snap.gpus[0].vgpu_instances}
        assert all(size is not None for size in sizes.values()), f"t={t}"
        if t in (0, 10):
            expected += len(sizes)
        else:
            new = sizes.keys() - previous.keys()
            expected += len(new)
            started += len(new)
            assert {i: sizes[i] for i in sizes if i in previous} == {
                i: previous[i] for i in sizes if i in previous
            }, f"t={t}: the last size stands"
        previous = sizes
    every_cycle = sum(len(s.gpus[0].vgpu_instances) for s in snaps)
    assert calls["nvmlVgpuInstanceGetRuntimeStateSize"] == expected < every_cycle / 2
    assert started >= 3, "VMs started between the reads, and were read at once"
