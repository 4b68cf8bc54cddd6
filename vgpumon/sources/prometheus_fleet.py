"""The hosts a Prometheus server scrapes, as one feed of :class:`~vgpumon.feed.Fleet` news:
``top --prometheus URL`` with no other source.

Beyond a few hundred hosts, or from a laptop outside the hosts' network, polling every exporter
does not scale or does not reach; the Prometheus (Thanos, Mimir, VictoriaMetrics) that already
scrapes them does. :class:`PrometheusFleet` reads the fleet from its query API and gives ``top``
the same news a feed of live exporters gives: per host, a :class:`~vgpumon.model.Snapshot`
rebuilt from the host's series (:mod:`vgpumon.metrics.rebuild`, the metric table read
backwards), so every screen shows the same columns, badges and verdicts, as of the host's last
scrape. Verdicts (starved, idle, expiring) are the exporter's, read from its series; nothing here
decides one again.

What is read, and how often:

* the hosts: the targets of every job that has a vgpumon exporter (``up`` and
  ``vgpumon_build_info``), narrowed by ``--prometheus.selector``, named by their ``instance`` and
  the target labels of ``--prometheus.group-by`` (``eu-1/gpu-7:9839``), in that order;
* per refresh, one query per family the screen reads (:data:`SCREEN_FAMILIES`), for all hosts at
  once, never one per host; a host shown in full (its own screens) gets one more query for all
  its series. State sets come as their current state only (``== 1``), Xid counters as those
  that happened (``> 0``): nothing the rebuild needs is left out;
* a refresh every scrape interval (the targets' ``scrapeInterval``, else measured from ``up``'s
  samples): Prometheus has nothing newer in between.

What can go wrong is shown, and never waited on by the screen (the feed runs on its own thread):
a target Prometheus cannot scrape is ``unreachable`` with Prometheus' reason and its last scraped
data (stale); Prometheus down or slow turns every host stale, with the reason, once the data is
two refreshes old; a query it refuses or answers partially (a Thanos store down) keeps the
family's last answer and says ``partial`` on each host. Every answer is capped
(:mod:`vgpumon.sources.promapi`).

A host whose exporter this machine can reach may be read live instead (:meth:`live`, ``L`` in
``top``): its snapshots then come from the exporter itself (:class:`~vgpumon.sources.remote.
RemoteFeed`), every interval, until asked back or until the exporter fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpumon.errors import VgpumonError
from vgpumon.feed import (
    SCREENS,
    VIA_LIVE,
    VIA_STORE,
    Fleet,
    Focus,
    HostState,
    HostUpdate,
    tell,
)
from vgpumon.metrics import rebuild as rb
from vgpumon.metrics.table import FAMILIES, StateValues
from vgpumon.model import HostRollup, Snapshot
from vgpumon.sources.fleet import nvml_down
from vgpumon.sources.promapi import (
    Answer,
    PrometheusClient,
    PrometheusError,
    Target,
    quote,
    regex_of,
)
from vgpumon.sources.remote import Connection, RemoteFeed, RemoteTarget

log = logging.getLogger(__name__)

HOST_LABEL = "instance"
BUILD_INFO = "vgpumon_build_info"
TIMESTAMP = "vgpumon_last_sample_timestamp_seconds"
# How far back a host whose target is down is looked for (its last scraped data) and a
# vgpumon job is recognised (a job whose exporters are all down now is still one).
LOOKBACK = "1h"
MIN_INTERVAL_SECONDS = 1.0
MAX_INTERVAL_SECONDS = 60.0
DEFAULT_INTERVAL_SECONDS = 15.0  # Prometheus' default scrape interval, until one is found
REDISCOVER_SECONDS = 300.0  # the scrape interval and targets' URLs are looked at again
STALE_AFTER_REFRESHES = 2  # Prometheus silent this many intervals: every host is stale
MAX_CONCURRENT_QUERIES = 8
LIVE_INTERVAL_SECONDS = 1.0  # a host read live is polled as top --url polls
BACKOFF_CAP_SECONDS = 30.0


def _families(*names: str) -> frozenset[str]:
    """Families read back by name; a name the rebuild does not read fails at import."""
    unknown = sorted(set(names) - rb.READ_BACK)
    if unknown:
        raise AssertionError(f"not families the rebuild reads: {unknown}")
    return frozenset(names)


def _of(*prefixes: str) -> frozenset[str]:
    """Every family read back whose name starts with one of ``prefixes``."""
    return frozenset(n for n in rb.READ_BACK if n.startswith(prefixes))


# What each screen reads for every host (a host's own screens read all of its series): enough
# for its rows, badges and the event log, and the fleet's judge (vgpumon_up).
# tests/sources/test_prometheus_screens.py rebuilds every scenario from these alone and compares
# what each screen shows with a rebuild from every family.
FLEET = _families(
    "vgpumon_up",
    TIMESTAMP,
    "vgpumon_sampler_wedged",
    "vgpumon_gpu_up",
    "vgpumon_gpu_virtualization_mode",
    "vgpumon_gpu_mig_mode_enabled",
    "vgpumon_gpu_utilization_ratio",
    # Memory in use as the exporter decided it (with a MIG-backed vGPU host's guests), and
    # NVML's figure, shown for an exporter older than that family.
    "vgpumon_gpu_memory_in_use_bytes",
    "vgpumon_gpu_memory_used_bytes",
    "vgpumon_gpu_memory_total_bytes",
    "vgpumon_gpu_power_watts",
    "vgpumon_gpu_power_limit_watts",
    "vgpumon_gpu_xid_errors_total",
    "vgpumon_gpu_recovery_action",
    "vgpumon_gpu_repair_pending",
    "vgpumon_gpu_unrepairable_memory",
    "vgpumon_gpu_cc_enabled",
    "vgpumon_gpu_cc_ready",
    "vgpumon_vgpu_info",
    "vgpumon_vgpu_license_state",
    "vgpumon_vgpu_license_expiry_timestamp_seconds",
    "vgpumon_guest_license_state",
    "vgpumon_guest_license_expiry_timestamp_seconds",
    # The lease verdict the expiring badge reads (docs/licensing.md).
    "vgpumon_vgpu_license_renewal_overdue",
    "vgpumon_guest_license_renewal_overdue",
    # vGPUs gone while their VM runs (the event log), and what became of the others.
    "vgpumon_gpu_vgpus_vanished",
    "vgpumon_gpu_vgpu_departures_total",
    "vgpumon_vgpu_idle_seconds",
    "vgpumon_process_idle_seconds",
    *(n for n in rb.READ_BACK if n.startswith("vgpumon_vgpu_scheduler_share")),
)
# A filter's terms read every row's text: names, modes, types, holders, what fits.
FILTER = FLEET | _of(
    "vgpumon_gpu_info",
    "vgpumon_mig_instance_info",
    "vgpumon_vgpu_scheduler_policy",
    "vgpumon_gpu_allocation_info",
    "vgpumon_vgpu_type_",
    "vgpumon_mig_profile_",
    "vgpumon_gpu_mig_free_slices",
    "vgpumon_gpu_vgpu_framebuffer_",
    "vgpumon_mig_vgpu_",
)
SCREEN_FAMILIES: dict[str, frozenset[str]] = {
    "fleet": FLEET,
    "host": FLEET,
    "events": FLEET,
    "scheduler": FLEET | _of("vgpumon_vgpu_scheduler_", "vgpumon_vgpu_utilization_ratio"),
    "licenses": FLEET | _of("vgpumon_vgpu_license_", "vgpumon_guest_license_"),
    "capacity": FILTER | _of("vgpumon_vgpu_framebuffer_", "vgpumon_mig_memory_"),
    "usage": FLEET
    | _of(
        "vgpumon_vgpu_busy",
        "vgpumon_vgpu_framebuffer_byte",
        "vgpumon_vgpu_energy",
        "vgpumon_pod_",
        "vgpumon_mig_sm_active_seconds",
        "vgpumon_mig_memory_byte",
        "vgpumon_mig_energy",
        "vgpumon_gpu_dead_holder_",
    ),
}
if set(SCREEN_FAMILIES) != set(SCREENS):
    raise AssertionError("SCREEN_FAMILIES must say what each of feed.SCREENS reads")

# The fleet rules (packaging/prometheus/vgpumon-fleet.rules.yml): one series per host for each
# figure of the fleet screen, and the field of vgpumon.model.HostRollup each gives. With them in
# Prometheus, a fleet of more than ROLLUP_ABOVE_HOSTS hosts is read as these alone, each host's
# own series only for the hosts shown in full; without them, or below, every host's series.
ROLLUPS: dict[str, str] = {
    "vgpumon:host_gpus:count": "gpus",
    "vgpumon:host_gpus_lost:count": "gpus_lost",
    "vgpumon:host_gpu_utilization:avg": "utilization",
    "vgpumon:host_gpu_memory_used_bytes:sum": "memory_used_bytes",
    "vgpumon:host_gpu_memory_total_bytes:sum": "memory_total_bytes",
    "vgpumon:host_gpu_power_watts:sum": "power_watts",
    "vgpumon:host_gpu_power_limit_watts:sum": "power_limit_watts",
    "vgpumon:host_vgpus:count": "vgpus",
    "vgpumon:host_vgpus_license_problem:count": "vgpu_license_problems",
    "vgpumon:host_licenses_unlicensed:count": "licenses_unlicensed",
    "vgpumon:host_licenses_expiring:count": "licenses_expiring",
    "vgpumon:host_vgpus_starved:count": "vgpus_starved",
    "vgpumon:host_idle_holders:count": "idle_holders",
    "vgpumon:host_gpus_with_xid:count": "gpus_with_xid",
    "vgpumon:host_gpus_unrepairable_memory:count": "memory_faults",
    "vgpumon:host_gpus_repair_pending:count": "repairs_pending",
}
BY_MODE = "vgpumon:host_gpus:count_by_mode"
BY_CC = "vgpumon:host_gpus:count_by_cc"
RECOVERY = "vgpumon:host_gpus_recovery_action:count"
RULES_PRESENT = "vgpumon:host_gpus:count"  # the rules are loaded where this has series
XIDS = "vgpumon:host_xid:count"
WEDGED = "vgpumon_sampler_wedged"
UP = "vgpumon_up"
ROLLUP_QUERIES = frozenset({*ROLLUPS, BY_MODE, BY_CC, RECOVERY, XIDS, WEDGED, UP})
ROLLUP_ABOVE_HOSTS = 500
NVML_DOWN = "NVML is not initialised"  # as vgpumon.sources.fleet.nvml_down says it
# Screens whose hosts' rows the rollups give (the others read the hosts' own series).
ROLLUP_SCREENS = frozenset({"fleet", "host", "events"})

_STATE_SETS = frozenset(f.name for f in FAMILIES if isinstance(f.rows, StateValues))
_COUNTED = frozenset({"vgpumon_gpu_xid_errors_total"})  # a zero is the table's, not a reading


def family_query(client: PrometheusClient, name: str, *extra: str) -> str:
    """The query of one family: its series (narrowed), only those the rebuild reads."""
    selector = client.select(name, *extra)
    if name in _STATE_SETS:
        return f"{selector} == 1"
    if name in _COUNTED:
        return f"{selector} > 0"
    return selector


def _natural(text: str) -> tuple[Any, ...]:
    """``gpu-10`` after ``gpu-9``: digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


@dataclass
class _Host:
    """What the feed holds of one host between refreshes."""

    key: str
    labels: dict[str, str]  # its instance and group labels
    order: tuple[Any, ...]
    up: bool | None = None  # Prometheus' last scrape of it answered
    snapshot: Snapshot | None = None
    received_at: float | None = None
    version: tuple[Any, ...] | None = None  # what the held snapshot was built from
    error: str | None = None
    update: HostUpdate | None = None
    target: Target | None = None
    looked_back: bool = False  # its last scraped data was looked for (down at start)
    rollup: HostRollup | None = None  # the fleet rules' figures (read instead of its series)
    live: RemoteFeed | None = None  # its exporter, read live (run by the fleet's run)
    note: str | None = None  # why reading it live stopped, until it is asked live again

    def matchers(self) -> tuple[str, ...]:
        return tuple(f"{k}={quote(v)}" for k, v in self.labels.items())


@dataclass
class _Answers:
    """One refresh's answers: samples per host and family, what failed, what was partial."""

    by_host: dict[str, dict[str, list[tuple[Mapping[str, str], float]]]] = field(
        default_factory=dict
    )
    failed: dict[str, str] = field(default_factory=dict)  # family -> one-line reason
    warnings: set[str] = field(default_factory=set)


class PrometheusFleet:
    """The hosts ``client``'s server scrapes, as a feed of :class:`~vgpumon.feed.Fleet` news.

    ``group_by``: target labels that name and order hosts before their ``instance``.
    ``interval_seconds``: time between refreshes (None: each scrape interval).
    ``live_connection``: how to reach an exporter opened live (TLS, credentials).
    """

    def __init__(
        self,
        client: PrometheusClient,
        *,
        group_by: Sequence[str] = (),
        interval_seconds: float | None = None,
        live_connection: Connection | None = None,
        rollup_above_hosts: int = ROLLUP_ABOVE_HOSTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.group_by = tuple(group_by)
        self.fixed_interval = interval_seconds
        self.interval_seconds = interval_seconds or DEFAULT_INTERVAL_SECONDS
        self.live_connection = live_connection or Connection()
        self.rollup_above_hosts = rollup_above_hosts
        self.rules: bool | None = None  # the fleet rules are in Prometheus (None: not asked)
        self._clock = clock
        self._focus = Focus()
        self._hosts: dict[str, _Host] = {}
        self._keys: dict[Any, tuple[str, dict[str, str]]] = {}  # series' host labels -> host
        self._fleet: Fleet | None = None
        self._listeners: list[Callable[[Fleet], object]] = []
        self._wake: asyncio.Event | None = None
        self._last_success: float | None = None
        self._failures = 0
        self._problem: str | None = None  # Prometheus gave nothing: why (every host stale)
        self._partial: str | None = None
        self._discovered_at: float | None = None
        self._families_read: frozenset[str] = frozenset()
        self._answers: dict[str, dict[str, list[tuple[Mapping[str, str], float]]]] = {}
        self.refreshes = 0  # refreshes done (a bench divides query time by it)
        self.refresh_seconds_total = 0.0  # their wall time, queries and rebuilds

    # ------------------------------------------------------------------ the feed shape

    @property
    def name(self) -> str:
        where = self.client.url + ("" if not self.client.matchers else self.client.selector)
        parts = [f"Prometheus {where}"]
        if self._problem is not None:
            parts.append(self._problem)
        elif self._partial is not None:
            parts.append(f"partial: {self._partial}")
        return " · ".join(parts)

    @property
    def latest(self) -> Fleet:
        if self._fleet is None:
            ordered = sorted(self._hosts.values(), key=lambda h: h.order)
            self._fleet = Fleet(self.name, tuple(self._update_of(h) for h in ordered))
        return self._fleet

    @property
    def not_ready_reason(self) -> str | None:
        if self._last_success is not None:
            return None
        return self._problem or "no answer from Prometheus yet"

    def on_snapshot(self, listener: Callable[[Fleet], object]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def focus(self, focus: Focus) -> None:
        """Read what ``focus`` shows; a refresh now when it needs families not read yet."""
        if focus == self._focus:
            return
        self._focus = focus
        wanted = self._wanted_families()
        full = set(focus.hosts) & set(self._hosts)
        if not wanted <= self._families_read or full:
            self.refresh()

    def live(self, host: str, on: bool) -> None:
        """Read ``host`` from its own exporter (on) or back from Prometheus (off); the run
        starts or stops the exporter's feed at once."""
        found = self._hosts.get(host)
        if found is None:
            return
        if on and found.live is None:
            found.note = None
            found.live = self._live_feed(found)
        elif not on and found.live is not None:
            found.live = None
            self._changed()
        self.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh every interval (sooner on :meth:`refresh`) until ``stop`` is set; then stop
        the hosts read live, mark every host closed and close the HTTP sessions."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()

        async def relay_stop() -> None:
            await stop.wait()
            assert self._wake is not None
            self._wake.set()

        relay = loop.create_task(relay_stop())
        live: dict[RemoteFeed, asyncio.Task[None]] = {}  # the hosts read live, by their feed
        try:
            while not stop.is_set():
                started = loop.time()
                self._wake.clear()
                try:
                    await self.refresh_once()
                except Exception as exc:  # a bug must not end the loop silently
                    log.exception("Prometheus refresh failed")
                    self._failed(f"internal error: {type(exc).__name__}")
                # Each host asked live has its exporter's feed running; one asked back, gone
                # from Prometheus or failed has it stopped.
                wanted = {h.live for h in self._hosts.values() if h.live is not None}
                for feed in wanted - live.keys():
                    live[feed] = loop.create_task(_run_live(feed), name=f"vgpumon-live-{feed.name}")
                for feed in live.keys() - wanted:
                    live.pop(feed).cancel()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(
                        self._wake.wait(), timeout=self._next_delay(loop.time() - started)
                    )
        finally:
            relay.cancel()
            for task in live.values():
                task.cancel()
            await asyncio.gather(*live.values(), return_exceptions=True)
            for host in self._hosts.values():
                host.update = HostUpdate(
                    host=host.key,
                    state=HostState.CLOSED,
                    snapshot=host.snapshot,
                    received_at=host.received_at,
                    sequence=(host.update.sequence + 1) if host.update else 0,
                    via=VIA_STORE,
                )
            self._changed()
            await self.client.close()

    def _next_delay(self, elapsed: float) -> float:
        if self._failures == 0:
            return max(0.0, self.interval_seconds - elapsed)
        return min(BACKOFF_CAP_SECONDS, self.interval_seconds * 2 ** min(self._failures - 1, 5))

    # ------------------------------------------------------------------ one refresh

    def _wanted_families(self) -> frozenset[str]:
        focus = self._focus
        wanted = SCREEN_FAMILIES.get(focus.screen, FLEET)
        return wanted | FILTER if focus.filtering else wanted

    async def refresh_once(self) -> None:
        """One refresh: the hosts, then what the screen reads; tells the listeners."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            ups = await self.client.instant(self._hosts_query())
            seen = self._take_hosts(ups.series)
            await self._discover(loop.time())
        except PrometheusError as exc:
            self._failed(exc.reason)
            return
        full = [self._hosts[h] for h in self._focus.hosts if h in self._hosts]
        rollups = self.rollup_mode
        families = ROLLUP_QUERIES if rollups else self._wanted_families()
        answers = await self._read(families, full)
        answers.warnings.update(ups.warnings)
        if not rollups:
            await self._look_back()
        self._families_read = families
        self._build(answers, families, {h.key for h in full}, seen, rollups=rollups)
        self._last_success = self._clock()
        self._failures = 0
        self._problem = None
        self.refreshes += 1
        self.refresh_seconds_total += loop.time() - started
        self._changed()

    @property
    def rollup_mode(self) -> bool:
        """The hosts not shown in full are read as the fleet rules' figures: the rules are
        there, the fleet is large, and the screen needs no more than their rows."""
        focus = self._focus
        return (
            bool(self.rules)
            and len(self._hosts) > self.rollup_above_hosts
            and focus.screen in ROLLUP_SCREENS
            and not focus.filtering
        )

    def _hosts_query(self) -> str:
        jobs = f"group by (job) (last_over_time({self.client.select(BUILD_INFO)}[{LOOKBACK}]))"
        return f"{self.client.select('up')} and on (job) {jobs}"

    def _key_of(self, labels: Mapping[str, str]) -> tuple[str, dict[str, str]] | None:
        """The host a series is of: its key and its labels (instance and the group's)."""
        instance = labels.get(HOST_LABEL)
        if not instance or type(instance) is not str:
            return None
        if not self.group_by:
            found = self._keys.get(instance)
            if found is None:
                found = self._keys[instance] = (instance, {HOST_LABEL: instance})
            return found
        values = tuple(labels.get(name, "") for name in self.group_by)
        seen = (instance, *values)
        found = self._keys.get(seen)
        if found is None:
            if not all(type(v) is str for v in values):
                return None
            own = dict(zip(self.group_by, values, strict=True))
            own[HOST_LABEL] = instance
            key = "/".join([*(v for v in values if v), instance])
            found = self._keys[seen] = (key, own)
        return found

    def _take_hosts(self, series: Iterable[tuple[dict[str, str], float]]) -> set[str]:
        """The hosts of this refresh from ``up``; a host gone from Prometheus is dropped."""
        seen: set[str] = set()
        for labels, value in series:
            found = self._key_of(labels)
            if found is None:
                continue
            key, own = found
            seen.add(key)
            host = self._hosts.get(key)
            if host is None:
                order = tuple(_natural(own[n]) for n in (*self.group_by, HOST_LABEL))
                host = self._hosts[key] = _Host(key, own, order)
            host.up = value == 1.0
        for key in set(self._hosts) - seen:
            self._hosts.pop(key)  # read live, its feed stops at the end of this refresh
        return seen

    async def _read(self, families: frozenset[str], full: Sequence[_Host]) -> _Answers:
        """One query per family for every host, one per host shown in full; concurrently."""
        answers = _Answers()
        gate = asyncio.Semaphore(MAX_CONCURRENT_QUERIES)

        async def one(name: str | None, promql: str) -> tuple[str | None, Answer | str]:
            async with gate:
                try:
                    return name, await self.client.instant(promql)
                except PrometheusError as exc:
                    return name, exc.reason

        jobs = [one(name, family_query(self.client, name)) for name in sorted(families)]
        # Every family of the table: the rebuild also reads what the derived ones say (a
        # process list complete or cut, counted or unreadable).
        names = regex_of(sorted({f.name for f in FAMILIES}))
        for host in full:
            matchers = (f"__name__=~{quote(names)}", *host.matchers())
            jobs.append(one(None, "{" + ",".join((*self.client.matchers, *matchers)) + "}"))
        for name, got in await asyncio.gather(*jobs):
            if isinstance(got, str):
                answers.failed[name or "a host's series"] = got
                continue
            answers.warnings.update(got.warnings)
            for labels, value in got.series:
                if not math.isfinite(value):
                    continue
                found = self._key_of(labels)
                family = name or labels.get("__name__")
                if found is None or family is None:
                    continue
                per = answers.by_host.setdefault(found[0], {})
                per.setdefault(family, []).append((labels, value))
        return answers

    async def _look_back(self) -> None:
        """A host down since before ``top`` started: its last scraped data, once."""
        hosts = [h for h in self._hosts.values() if h.up is False and not h.looked_back]
        if not hosts or self._hosts_all_unknown():
            return
        for host in hosts:
            host.looked_back = True
        samples: dict[str, dict[str, list[tuple[Mapping[str, str], float]]]] = {}
        instances = regex_of(sorted({h.labels[HOST_LABEL] for h in hosts}))
        for name in sorted(FLEET):
            selector = self.client.select(name, f"{HOST_LABEL}=~{quote(instances)}")
            try:
                got = await self.client.instant(f"last_over_time({selector}[{LOOKBACK}])")
            except PrometheusError:
                return  # the next refresh's own failure says why
            for labels, value in got.series:
                found = self._key_of(labels)
                if found is not None and found[0] in self._hosts and math.isfinite(value):
                    per = samples.setdefault(found[0], {})
                    per.setdefault(name, []).append((labels, value))
        for key, per in samples.items():
            host = self._hosts[key]
            if host.snapshot is None and TIMESTAMP in per:
                # Every state of a state set and every Xid at 0 come back: the rebuild reads
                # the current state (1) and the Xids that happened.
                host.snapshot = rb.rebuild(per)
                host.received_at = host.snapshot.timestamp

    def _hosts_all_unknown(self) -> bool:
        return all(h.up is None for h in self._hosts.values())

    def _build(
        self,
        answers: _Answers,
        families: frozenset[str],
        full: set[str],
        seen: set[str],
        *,
        rollups: bool = False,
    ) -> None:
        """Each host's snapshot and state from this refresh's answers."""
        # A family whose query failed keeps its last answer (said partial on every host).
        for name in answers.failed:
            for key, per in self._answers.items():
                if name in per:
                    answers.by_host.setdefault(key, {})[name] = per[name]
        self._answers = answers.by_host
        problems = [f"{name}: {reason}" for name, reason in sorted(answers.failed.items())]
        problems += sorted(answers.warnings)
        self._partial = (
            None
            if not problems
            else f"{len(problems)} quer{'y' if len(problems) == 1 else 'ies'} incomplete "
            f"({problems[0]})"
        )
        now = self._clock()
        for key in seen:
            host = self._hosts[key]
            if host.live is not None:
                continue  # its exporter answers for it
            per = answers.by_host.get(key, {})
            if rollups and key not in full:
                rollup = rollup_of(per)
                host.rollup = host.rollup if rollup == host.rollup else rollup
                host.snapshot, host.version = None, None
                nvml = per.get(UP) or []
                down = bool(nvml) and all(v == 0 for _, v in nvml) and not rollup.gpus
                host.error = NVML_DOWN if down else self._partial_note()
                if not host.up:
                    host.error = self._scrape_error(host)
                continue
            host.rollup = None
            if host.up and TIMESTAMP in per:
                stamp = max(v for _, v in per[TIMESTAMP])
                version = (stamp, families, key in full, tuple(sorted(answers.failed)))
                if version != host.version or host.snapshot is None:
                    host.snapshot = rb.rebuild(per)
                    host.received_at = now
                    host.version = version
                reason = nvml_down(host.snapshot)
                host.error = reason if reason is not None else self._partial_note()
            elif host.up:
                host.error = "no vgpumon series in Prometheus for this target"
            else:
                host.error = self._scrape_error(host)

    @staticmethod
    def _scrape_error(host: _Host) -> str:
        said = host.target.last_error if host.target is not None else None
        return f"Prometheus cannot scrape it: {said or 'the last scrape failed'}"

    def _partial_note(self) -> str | None:
        return None if self._partial is None else f"partial data: {self._partial}"

    def _update_of(self, host: _Host) -> HostUpdate:
        """The host's :class:`HostUpdate`, the same object while nothing changed."""
        live = host.live.latest if host.live is not None else None
        snapshot = live if live is not None else host.snapshot
        received = time.time() if live is not None else host.received_at
        if live is not None:  # its exporter answers here, whatever Prometheus says
            reason = nvml_down(live)
            state = HostState.UP if reason is None else HostState.UNREACHABLE
            error = reason
        elif self._problem is not None and self._last_success is not None:
            state, error = HostState.UNREACHABLE, self._problem
        elif host.up is None:
            state, error = HostState.CONNECTING, None
        elif host.up and self._answers_for(host):
            state, error = HostState.UP, host.error
        else:
            state, error = HostState.UNREACHABLE, host.error
        if host.note is not None and live is None:
            error = host.note if error is None else f"{host.note}; {error}"
        via = VIA_LIVE if live is not None else VIA_STORE
        old = host.update
        rollup = host.rollup if snapshot is None else None
        if (
            old is not None
            and old.state is state
            and old.snapshot is snapshot
            and old.rollup is rollup
            and old.error == error
            and old.via == via
        ):
            return old
        host.update = HostUpdate(
            host=host.key,
            state=state,
            snapshot=snapshot,
            error=error,
            received_at=received,
            sequence=0 if old is None else old.sequence + 1,
            via=via,
            rollup=rollup,
        )
        return host.update

    @staticmethod
    def _answers_for(host: _Host) -> bool:
        """The host's data says its NVML is up: a snapshot with GPUs or NVML up, or figures
        that were not judged down."""
        if host.snapshot is not None:
            return nvml_down(host.snapshot) is None
        return host.rollup is not None and host.error != NVML_DOWN

    def _failed(self, reason: str) -> None:
        """Prometheus gave nothing this refresh: after two intervals every host is stale."""
        self._failures += 1
        problem = f"Prometheus: {reason}"
        if self._last_success is None:
            self._problem = problem
        else:
            age = self._clock() - self._last_success
            if age < STALE_AFTER_REFRESHES * self.interval_seconds:
                return  # one slow answer is not an outage
            self._problem = f"{problem} (data {age:.0f} s old)"
        self._changed()

    def _changed(self) -> None:
        self._fleet = None
        tell(self._listeners, self.latest)

    # ------------------------------------------------------------------ discovery

    async def _discover(self, now: float) -> None:
        """The targets' scrape URLs and last errors, and the scrape interval: at start, then every
        few minutes and when a host is down (its reason)."""
        due = self._discovered_at is None or now - self._discovered_at >= REDISCOVER_SECONDS
        if not due and not any(h.up is False and h.target is None for h in self._hosts.values()):
            return
        self._discovered_at = now
        targets = await self.client.targets()
        intervals: list[float] = []
        if targets is not None:
            by_key = {}
            for target in targets:
                found = self._key_of(target.labels)
                if found is not None:
                    by_key[found[0]] = target
            for key, host in self._hosts.items():
                host.target = by_key.get(key)
            intervals = [
                t.interval_seconds
                for key, t in by_key.items()
                if t.interval_seconds and key in self._hosts
            ]
        if not intervals:
            intervals = await self._measured_intervals()
        try:
            rules = await self.client.instant(f"count({self.client.select(RULES_PRESENT)})")
            self.rules = bool(rules.series)
        except PrometheusError:
            self.rules = False
        if self.fixed_interval is None and intervals:
            interval = sorted(intervals)[len(intervals) // 2]
            self.interval_seconds = min(MAX_INTERVAL_SECONDS, max(MIN_INTERVAL_SECONDS, interval))

    async def _measured_intervals(self) -> list[float]:
        """Scrape intervals from the gaps between ``up``'s samples (Thanos, Mimir: no targets
        API)."""
        try:
            body = await self.client.raw_instant(f"{self.client.select('up')}[2m]")
        except PrometheusError:
            return []
        data = body.get("data") if isinstance(body, dict) else None
        result = data.get("result") if isinstance(data, dict) else None
        out = []
        for item in result if isinstance(result, list) else ():
            values = item.get("values") if isinstance(item, dict) else None
            try:
                times = [float(v[0]) for v in values or ()]
            except (TypeError, ValueError, IndexError):
                continue
            gaps = sorted(b - a for a, b in itertools.pairwise(times) if b > a)
            if gaps:
                out.append(gaps[len(gaps) // 2])
        return out

    # ------------------------------------------------------------------ live hosts

    def _live_feed(self, host: _Host) -> RemoteFeed | None:
        """The feed of ``host``'s exporter (the run runs it); None, said on the host, when its
        URL cannot be used."""
        try:
            feed = RemoteFeed(
                RemoteTarget(_exporter_url(host)),
                self.live_connection,
                interval_seconds=LIVE_INTERVAL_SECONDS,
            )
        except VgpumonError as exc:
            host.note = f"live: {exc}"
            self._changed()
            return None

        def arrived(_snapshot: Snapshot) -> None:
            if host.live is feed:
                self._changed()

        def failed(reason: str) -> None:
            if host.live is feed:  # back on Prometheus; the run stops the feed
                host.live = None
                host.note = f"live: {reason} (back on Prometheus)"
                self._changed()
                self.refresh()

        feed.on_snapshot(arrived)
        feed.on_failure(failed)
        return feed


async def _run_live(feed: RemoteFeed) -> None:
    """A host's exporter read live, until its task is cancelled; its session closed after."""
    try:
        await feed.run(asyncio.Event())
    finally:
        await feed.close()


def _exporter_url(host: _Host) -> str:
    """Where the host's exporter answers: the target's scrape URL (its path dropped), else
    ``http://INSTANCE``."""
    target = host.target
    if target is not None and target.scrape_url:
        return target.scrape_url
    return f"http://{host.labels[HOST_LABEL]}"


def rollup_of(per: Mapping[str, list[tuple[Mapping[str, str], float]]]) -> HostRollup:
    """One host's figures from the fleet rules' series (and its wedged flag)."""
    values: dict[str, Any] = {}
    for rule, name in ROLLUPS.items():
        got = [v for _, v in per.get(rule, ()) if math.isfinite(v)]
        if got:
            values[name] = got[0]
    for name in ("gpus", "gpus_lost", "vgpus", "vgpu_license_problems", "licenses_unlicensed",
                 "licenses_expiring", "vgpus_starved", "idle_holders", "gpus_with_xid",
                 "memory_used_bytes", "memory_total_bytes", "memory_faults",
                 "repairs_pending"):  # fmt: skip
        if name in values:
            values[name] = int(values[name])
    modes: dict[str, int] = {}
    for labels, value in per.get(BY_MODE, ()):
        mode = labels.get("mode")
        if isinstance(mode, str) and math.isfinite(value):
            modes[mode] = modes.get(mode, 0) + int(value)
    xids = []
    for labels, value in per.get(XIDS, ()):
        xid = labels.get("xid")
        if isinstance(xid, str) and xid.isdigit() and value > 0:
            xids.append(int(xid))
    wedged = any(v == 1.0 for _, v in per.get(WEDGED, ()))
    return HostRollup(
        modes=tuple(sorted(modes.items())),
        recovery_actions=_label_values(per.get(RECOVERY, ()), "action"),
        cc=_label_values(per.get(BY_CC, ()), "cc"),
        newest_xid=max(xids) if xids else None,
        wedged=wedged,
        **values,
    )


def _label_values(series: Iterable[tuple[Mapping[str, str], float]], label: str) -> tuple[str, ...]:
    """The values of ``label`` among series of GPUs counted (sorted, each once)."""
    found = {labels.get(label) for labels, value in series if math.isfinite(value) and value > 0}
    return tuple(sorted(v for v in found if isinstance(v, str) and v))
