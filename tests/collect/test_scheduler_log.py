"""The scheduler-log ring turned into counters: de-duplication, missed entries, attribution."""

from __future__ import annotations

from vgpumon.collect.scheduler import LogConsumer, owner_of
from vgpumon.collect.vgpu_raw import LogEntry

MS = 1_000_000


class Ring:
    """A driver-side ring of ``size`` entries: two runlists alternating 1 ms slices."""

    def __init__(self, size: int = 200, runlists: int = 2) -> None:
        self.size = size
        self.runlists = runlists
        self.entries: list[LogEntry] = []
        self.run_total = [0] * runlists
        self.preempt_total = [0] * runlists
        self.n = 0

    def produce(self, count: int) -> None:
        for _ in range(count):
            r = self.n % self.runlists
            self.n += 1
            self.run_total[r] += MS
            self.preempt_total[r] += 10_000
            self.entries.append(
                LogEntry(
                    timestamp_ns=self.n * MS,
                    run_total_ns=self.run_total[r],
                    run_ns=MS,
                    runlist=r,
                    target_slice_ns=MS,
                    preemption_total_ns=self.preempt_total[r],
                )
            )
        self.entries = self.entries[-self.size :]

    def read(self) -> tuple[list[LogEntry], bool]:
        return list(self.entries), len(self.entries) >= self.size


def test_overlapping_reads_count_each_entry_once() -> None:
    ring, c = Ring(), LogConsumer()
    owners = [11, 22]
    for _ in range(20):
        ring.produce(37)
        entries, full = ring.read()
        c.consume(entries, owners, full)
        c.consume(entries, owners, full)  # a second read with nothing new adds nothing
    assert c.entries_total == ring.n == 740
    assert c.missed_total == 0
    usage = {u.vgpu_id: u for u in c.usage(owners)}
    assert usage[11].run_seconds_total == ring.run_total[0] / 1e9
    assert usage[22].run_seconds_total == ring.run_total[1] / 1e9


def test_entries_with_the_same_timestamp_are_told_apart_by_runlist() -> None:
    c = LogConsumer()
    a = LogEntry(5 * MS, MS, MS, 0, MS, 0)
    b = LogEntry(5 * MS, MS, MS, 1, MS, 0)
    c.consume([a], [1, 2], False)
    c.consume([a, b], [1, 2], False)
    c.consume([a, b], [1, 2], False)
    assert c.entries_total == 2


def test_a_wrapped_ring_is_counted_as_missed_and_run_time_is_still_exact() -> None:
    ring, c = Ring(), LogConsumer()
    owners = [1, 2]
    ring.produce(150)
    c.consume(*_args(ring, owners))
    ring.produce(260)  # 60 more than the ring holds since the last read
    c.consume(*_args(ring, owners))
    assert c.entries_total == 150 + 200
    assert c.missed_total == 60
    # Cumulative timeRunTotal carries the time of the lost entries.
    total = sum(u.run_seconds_total for u in c.usage(owners))
    assert abs(total - sum(ring.run_total) / 1e9) < 1e-12
    preempt = sum(u.preemption_seconds_total for u in c.usage(owners))
    # Preemption counts from the first entry seen of each runlist (counters start at zero).
    assert abs(preempt - (sum(ring.preempt_total) - 2 * 10_000) / 1e9) < 1e-12


def test_a_full_ring_that_just_fits_is_not_a_loss() -> None:
    ring, c = Ring(), LogConsumer()
    ring.produce(200)
    c.consume(*_args(ring, [1, 2]))
    ring.produce(200)  # exactly the ring: no overlap, but nothing lost either
    c.consume(*_args(ring, [1, 2]))
    assert (c.entries_total, c.missed_total) == (400, 0)


def test_runlists_beyond_the_active_list_are_counted_but_not_attributed() -> None:
    ring, c = Ring(runlists=3), LogConsumer()
    ring.produce(30)
    c.consume(*_args(ring, [7, 8]))
    assert c.entries_total == 30 and c.unattributed_total == 10
    assert owner_of(2, [7, 8]) is None and owner_of(1, [7, 8]) == 8


def test_a_reassigned_runlist_starts_fresh_for_its_new_vgpu() -> None:
    c = LogConsumer()
    c.consume([LogEntry(1 * MS, 50 * MS, MS, 0, MS, 0)], [100], False)
    # vGPU 100 is destroyed, 200 takes position 0; its runlist total restarts.
    c.consume([LogEntry(2 * MS, 2 * MS, 2 * MS, 0, MS, 0)], [200], False)
    usage = {u.vgpu_id: u.run_seconds_total for u in c.usage([200])}
    assert usage == {200: 0.002}


def test_prune_forgets_destroyed_vgpus() -> None:
    ring, c = Ring(), LogConsumer()
    ring.produce(10)
    c.consume(*_args(ring, [1, 2]))
    c.prune([2])
    assert set(c.totals) == {2}
    assert [u.vgpu_id for u in c.usage([2])] == [2]
    assert all(k[1] == 2 for k in c._last_cumulative)


def test_no_usage_before_the_first_read() -> None:
    assert LogConsumer().usage([1, 2]) == ()


def _args(ring: Ring, owners: list[int]) -> tuple[list[LogEntry], list[int], bool]:
    entries, full = ring.read()
    return entries, owners, full
