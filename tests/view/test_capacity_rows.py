"""The capacity rows of a fleet of the three capacity scenarios, against the hand-computed answers
in each scenario file's header (docs/capacity.md's table)."""

from __future__ import annotations

from view_helpers import snapshot_of

from vgpumon.model import Snapshot
from vgpumon.view.capacity import MIG, VGPU, capacity_rows, fit_rows, fitting_names

GIB = 2**30
FLEET = (
    ("homog-01", "capacity-l40s-homogeneous"),
    ("hetero-01", "capacity-l40s-heterogeneous"),
    ("mig-01", "capacity-a100-mig"),
)


def fleet() -> list[tuple[str, Snapshot | None]]:
    return [(host, snapshot_of(scenario)) for host, scenario in FLEET]


def test_one_row_per_type_and_profile_with_a_count_per_offering_host() -> None:
    rows = {r.key: r for r in capacity_rows(fleet())}
    # 8Q: 3 more on the half-filled homogeneous L40S, 0 on its 1Q neighbour (offered but
    # blocked by homogeneous mode), 2 on the heterogeneous one.
    eight = rows["vGPU/L40S-8Q"]
    assert dict(eight.per_host) == {"homog-01": 3, "hetero-01": 2}
    assert (eight.total, eight.hosts_with_room) == (5, 2)
    assert dict(rows["vGPU/L40S-1Q"].per_host) == {"homog-01": 16}
    assert dict(rows["vGPU/L40S-4Q"].per_host) == {"hetero-01": 0}  # at its limit of 3
    assert dict(rows["vGPU/L40S-16Q"].per_host) == {"homog-01": 0, "hetero-01": 0}
    assert {k: dict(r.per_host) for k, r in rows.items() if r.kind == MIG} == {
        "MIG/1g.5gb": {"mig-01": 2},
        "MIG/1g.5gb+me": {"mig-01": 1},
        "MIG/2g.10gb": {"mig-01": 1},
        "MIG/3g.20gb": {"mig-01": 0},
        "MIG/4g.20gb": {"mig-01": 0},
        "MIG/7g.40gb": {"mig-01": 0},
    }


def test_rows_are_vgpu_types_then_mig_profiles_smallest_first() -> None:
    names = [(r.kind, r.name) for r in capacity_rows(fleet())]
    assert names[:7] == [
        (VGPU, "L40S-1Q"),
        (VGPU, "L40S-2Q"),
        (VGPU, "L40S-4Q"),
        (VGPU, "L40S-8Q"),
        (VGPU, "L40S-16Q"),
        (VGPU, "L40S-24Q"),
        (VGPU, "L40S-48Q"),
    ]
    assert names[7:] == [
        (MIG, "1g.5gb"),
        (MIG, "1g.5gb+me"),
        (MIG, "2g.10gb"),
        (MIG, "3g.20gb"),
        (MIG, "4g.20gb"),
        (MIG, "7g.40gb"),
    ]


def test_where_one_more_8q_fits_best_fit_first() -> None:
    """8Q: the heterogeneous L40S has 28 GiB free (20 left after one), the half-filled
    homogeneous one 24 GiB (16 left): the tighter fit comes first."""
    rows = fit_rows(fleet(), "l40s-8q")
    assert [(r.rank, r.host, r.gpu_index, r.creatable, r.remaining_after) for r in rows] == [
        (1, "homog-01", 0, 3, 16 * GIB),
        (2, "hetero-01", 0, 2, 20 * GIB),
    ]
    assert {r.name for r in rows} == {"L40S-8Q"}


def test_where_one_more_mig_instance_fits() -> None:
    (row,) = fit_rows(fleet(), "2g.10gb")
    assert (row.host, row.kind, row.creatable, row.remaining_after) == ("mig-01", MIG, 1, 0)
    assert fit_rows(fleet(), "3g.20gb") == []
    assert fit_rows(fleet(), "L40S-16Q") == []


def test_fitting_names_are_what_a_fits_term_checks() -> None:
    homogeneous = snapshot_of("capacity-l40s-homogeneous")
    half, ones = homogeneous.gpus
    assert fitting_names(half) == {"nvidia l40s-8q", "l40s-8q"}
    assert fitting_names(ones) == {"nvidia l40s-1q", "l40s-1q"}
    (mig,) = snapshot_of("capacity-a100-mig").gpus
    assert fitting_names(mig) == {"1g.5gb", "1g.5gb+me", "2g.10gb"}
