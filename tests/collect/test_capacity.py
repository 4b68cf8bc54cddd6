"""Capacity facts against the hand-computed answers written in each capacity scenario's header.

The expected numbers are copied from the scenario files' comments (worked out by hand from the
types, placements and MIG profiles), not derived by the code under test.
"""

from __future__ import annotations

from vgpumon.capacity import fits, vgpu_framebuffer
from vgpumon.model import Gpu, Snapshot, VgpuInstance, VgpuType
from vgpumon.testing import SimHostFactory

GIB = 2**30


def creatable(g: Gpu) -> dict[str, int | None]:
    return {(t.name or "").removeprefix("NVIDIA "): t.creatable_instances for t in g.vgpu_types}


async def test_half_filled_l40s_in_homogeneous_mode(sim_host: SimHostFactory) -> None:
    snap = await sim_host("capacity-l40s-homogeneous").cycle()
    half, ones = snap.gpus
    assert half.vgpu_heterogeneous_mode is False
    assert creatable(half) == {"L40S-8Q": 3, "L40S-16Q": 0, "L40S-24Q": 0, "L40S-48Q": 0}
    assert half.vgpu_framebuffer_free_bytes == 24 * GIB
    assert half.vgpu_framebuffer_stranded_bytes == 0
    assert creatable(ones) == {"L40S-1Q": 16, "L40S-2Q": 0, "L40S-8Q": 0}
    assert ones.vgpu_framebuffer_free_bytes == 32 * GIB
    assert ones.vgpu_framebuffer_stranded_bytes == 16 * GIB


async def test_heterogeneous_mode_with_placement_gaps(sim_host: SimHostFactory) -> None:
    snap = await sim_host("capacity-l40s-heterogeneous").cycle()
    (g,) = snap.gpus
    assert g.vgpu_heterogeneous_mode is True
    # 4Q has free slots but is at its limit of 3: none more, whatever the placements say.
    assert creatable(g) == {"L40S-4Q": 0, "L40S-8Q": 2, "L40S-16Q": 0}
    assert g.vgpu_framebuffer_free_bytes == 28 * GIB
    assert g.vgpu_framebuffer_stranded_bytes == 12 * GIB


async def test_a100_with_a_3g_and_a_2g_instance(sim_host: SimHostFactory) -> None:
    snap = await sim_host("capacity-a100-mig").cycle()
    (g,) = snap.gpus
    assert g.mig_free_slices == 2
    assert {p.name: p.creatable_instances for p in g.mig_profiles} == {
        "1g.5gb": 2,
        "1g.5gb+me": 1,
        "2g.10gb": 1,
        "3g.20gb": 0,
        "4g.20gb": 0,
        "7g.40gb": 0,
    }
    assert {p.name: p.slices for p in g.mig_profiles}["3g.20gb"] == 3
    (fit,) = fits([("h", snap)], "1g.5gb")
    assert (fit.kind, fit.creatable_instances, fit.remaining_after) == ("mig", 2, 1)
    assert fits([("h", snap)], "3g.20gb") == []


async def test_mig_capacity_follows_the_layout(sim_host: SimHostFactory) -> None:
    # a100-mig-mixed fills all 7 slices (2g + 1g + 1g + 3g): nothing more fits.
    snap = await sim_host("a100-mig-mixed").cycle()
    full, no_mig = snap.gpus
    assert full.mig_free_slices == 0
    assert {p.creatable_instances for p in full.mig_profiles} == {0}
    assert no_mig.mig_profiles == () and no_mig.mig_free_slices is None


def _type(type_id: int, name: str, fb_gib: int, most: int, fits_now: int | None) -> VgpuType:
    return VgpuType(
        type_id=type_id,
        name=name,
        framebuffer_bytes=fb_gib * GIB,
        max_instances=most,
        creatable_instances=fits_now,
    )


def test_stranded_is_unknown_when_a_type_count_is() -> None:
    types = (_type(1, "A-8Q", 8, 6, 3), _type(2, "A-16Q", 16, 3, None))
    running = tuple(VgpuInstance(vgpu_id=i, type_id=1) for i in (1, 2, 3))
    assert vgpu_framebuffer(types, running) == (24 * GIB, None)
    assert vgpu_framebuffer((), running) == (None, None)


def _gpu(index: int, free_gib: int, fits_now: int) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index}",
        vgpu_framebuffer_free_bytes=free_gib * GIB,
        vgpu_types=(_type(1, "NVIDIA L40S-8Q", 8, 6, fits_now),),
    )


def test_fits_lists_best_fit_first() -> None:
    a = Snapshot(timestamp=0, gpus=(_gpu(0, 48, 6), _gpu(1, 8, 1), _gpu(2, 0, 0)))
    b = Snapshot(timestamp=0, gpus=(_gpu(0, 16, 2),))
    got = fits([("a", a), ("b", b)], "l40s-8q")
    # The GPU with one slot left first, the empty one last; the full one is not listed.
    assert [(f.host, f.gpu_index, f.remaining_after) for f in got] == [
        ("a", 1, 0),
        ("b", 0, 8 * GIB),
        ("a", 0, 40 * GIB),
    ]
    # The driver's full name works as well as the short one; another type fits nowhere.
    assert [(f.host, f.gpu_index) for f in fits([("a", a)], "NVIDIA L40S-8Q")] == [
        ("a", 1),
        ("a", 0),
    ]
    assert fits([("a", a)], "L40S-16Q") == []
