"""A node-feature-discovery *local feature file* from a snapshot (``vgpumon node-features``).

NFD's nfd-worker reads every file in ``/etc/kubernetes/node-feature-discovery/features.d/`` (the
``local`` feature source): one ``key=value`` per line, ``#`` starts a comment, and files whose name
starts with a dot are skipped. Each key becomes a node label, so keys are
``vgpumon.io/<name>`` with a name valid as a label name and values valid as label values
(docs/kubernetes.md lists them). Pure functions of the model, plus an atomic writer that touches
the file only when a value changed: nfd-worker and the API server see no churn from a re-sample
that found the same node.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from vgpumon.capacity import short_type_name
from vgpumon.model import Gpu, Snapshot

PREFIX = "vgpumon.io/"
HEADER = "# vgpumon node features (node-feature-discovery local feature file); do not edit\n"
LICENSE_OK, LICENSE_UNLICENSED, LICENSE_EXPIRING = "ok", "unlicensed", "expiring"
# vGPU license states that mean the guest runs restricted or is about to (docs/vgpu.md).
UNLICENSED_STATES = ("unlicensed", "unlicensed_restricted")
MIXED = "mixed"

# Kubernetes label syntax: a name part and a value are at most 63 characters of [A-Za-z0-9_.-],
# starting and ending with an alphanumeric (a value may also be empty).
LABEL_PART_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_INVALID = re.compile(r"[^-A-Za-z0-9_.]+")


def label_part(text: str) -> str:
    """``text`` made valid as a label name part or value: other characters become ``-``."""
    cleaned = _INVALID.sub("-", text.strip())[:63].strip("-_.")
    return cleaned or "unknown"


def _one(values: Iterable[str | None]) -> str | None:
    """The one value all GPUs share, ``mixed`` when they differ, None when none has one."""
    found = {v for v in values if v}
    if not found:
        return None
    return found.pop() if len(found) == 1 else MIXED


def license_state(snapshot: Snapshot) -> str | None:
    """ok, unlicensed or expiring over every vGPU (host side) and licensed feature (guest side).

    Expiring is the collector's lease verdict (docs/licensing.md): a lease not renewed when due,
    never a lease that merely ends within some time (a healthy guest's always does).
    None where the node has no license to speak of (bare metal, pass-through, no data yet).
    """
    seen = False
    worst = LICENSE_OK
    for g in snapshot.gpus:
        items: list[tuple[bool | None, str | None, bool | None]] = [
            (v.license.licensed, v.license.state, v.license.renewal_overdue)
            for v in g.vgpu_instances
        ]
        items += [
            (f.licensed, f.state, f.renewal_overdue)
            for f in g.guest_licenses
            if f.enabled is not False
        ]
        for licensed, state, overdue in items:
            if licensed is None and state in (None, "unknown", "uninitialized"):
                continue  # nothing known yet (a booting VM): no vote
            seen = True
            if state in UNLICENSED_STATES or (licensed is False and state is None):
                return LICENSE_UNLICENSED
            if licensed and overdue:
                worst = LICENSE_EXPIRING
    return worst if seen else None


def starved(snapshot: Snapshot) -> str | None:
    """``true`` when the collector's share verdict calls a vGPU of the node starved, ``false``
    when every vGPU with a verdict is ok, None where no vGPU has one (docs/verdicts.md)."""
    states = {v.state for g in snapshot.gpus for s in g.vgpu_schedulers for v in s.shares}
    if "starved" in states:
        return "true"
    return "false" if "ok" in states else None


def _add_counts(out: dict[str, int], key: str, count: int | None) -> None:
    if count is not None:
        out[key] = out.get(key, 0) + count


def node_features(snapshot: Snapshot) -> dict[str, str]:
    """Feature name (without the prefix) -> value, for the GPUs of one node."""
    gpus: list[Gpu] = [g for g in snapshot.gpus if g.up]
    out: dict[str, str] = {"gpu.count": str(len(snapshot.gpus))}
    model = _one(g.name for g in gpus)
    if model is not None:
        out["gpu.model"] = label_part(model)
    mode = _one(g.virtualization_mode for g in gpus)
    if mode is not None:
        out["virtualization.mode"] = label_part(mode)
    if any(g.mig_mode_current for g in gpus):
        out["mig.enabled"] = "true"
    lic = license_state(snapshot)
    if lic is not None:
        out["license"] = lic
    hungry = starved(snapshot)
    if hungry is not None:
        out["vgpu.starved"] = hungry
    vgpu: dict[str, int] = {}
    mig: dict[str, int] = {}
    for g in gpus:
        for t in g.vgpu_types:
            if t.name:
                _add_counts(vgpu, label_part(short_type_name(t.name)), t.creatable_instances)
        for p in g.mig_profiles:
            if p.name:
                _add_counts(mig, label_part(p.name), p.creatable_instances)
    out.update(_health_labels(gpus))
    for name, count in sorted(vgpu.items()):
        out[label_part(f"vgpu.creatable.{name}")] = str(count)
    for name, count in sorted(mig.items()):
        out[label_part(f"mig.creatable.{name}")] = str(count)
    return out


def _health_labels(gpus: Iterable[Gpu]) -> dict[str, str]:
    """What the driver says the node's GPUs need, and confidential computing.

    Only what is there to say: a label appears while a GPU's driver asks for an action
    (``recovery.action``: the action, ``mixed`` when GPUs ask for different ones), a repair is
    pending or memory is beyond repair (``true``), and where CC is on (``cc.enabled=true``, with
    ``cc.ready``). A workload keeps off such nodes with ``DoesNotExist``; a healthy node carries
    none of them, so the labels change only when something happens.
    """
    gpus = [g for g in gpus if g.up]
    out: dict[str, str] = {}
    needed = sorted({g.recovery.action or "" for g in gpus if g.recovery.action_needed})
    if needed:
        out["recovery.action"] = needed[0] if len(needed) == 1 else MIXED
    if any(g.recovery.repair_pending for g in gpus):
        out["repair.pending"] = "true"
    if any(g.recovery.unrepairable_memory for g in gpus):
        out["memory.unrepairable"] = "true"
    cc = [g.conf_compute for g in gpus if g.conf_compute.feature_enabled]
    if cc:
        out["cc.enabled"] = "true"
        ready = [c.ready for c in cc if c.ready is not None]
        if ready:
            out["cc.ready"] = "true" if all(ready) else "false"
    return out


def render(features: dict[str, str]) -> str:
    """The file's text: a header comment, then ``vgpumon.io/NAME=VALUE`` lines, sorted."""
    lines = [f"{PREFIX}{name}={value}\n" for name, value in sorted(features.items())]
    return HEADER + "".join(lines)


def parse(text: str) -> dict[str, str]:
    """Read a local feature file as nfd-worker does: ``key[=value]`` lines, ``#`` comments."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        out[key] = value if "=" in line else "true"
    return out


class FeatureFileWriter:
    """Writes the features file atomically, and only when its content changes.

    The new text goes to a dot-file beside the target (nfd-worker skips dot-files), is flushed to
    disk and renamed over the target, so a reader sees the old file or the new one, never half.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._last: str | None = None

    def write(self, text: str) -> bool:
        """Write ``text`` if it differs from the file's; True when the file was rewritten."""
        if self._last is None:
            try:
                self._last = self.path.read_text(encoding="utf-8")
            except (FileNotFoundError, UnicodeDecodeError):
                self._last = None
        if text == self._last:
            return False
        directory = self.path.parent
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # nfd-worker may run as another user
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._last = text
        return True

    def update(self, snapshot: Snapshot) -> bool:
        return self.write(render(node_features(snapshot)))


class FeatureFileUpdater:
    """:class:`FeatureFileWriter` on a daemon thread of its own, for a caller that must not wait
    on the disk (``serve``'s event loop: an fsync can take seconds on a busy or failing disk, and
    every scrape would wait as long).

    :meth:`offer` hands over the newest text and returns at once; the thread writes it when the
    last write is done, skipping texts offered meanwhile (only the newest matters), so a stuck
    disk holds one thread and one text, never a queue. ``written`` and ``failed`` are called on
    that thread.
    """

    def __init__(
        self,
        writer: FeatureFileWriter,
        *,
        written: Callable[[], object] = lambda: None,
        failed: Callable[[OSError], object] = lambda err: None,
    ) -> None:
        self.writer = writer
        self._written = written
        self._failed = failed
        self._cond = threading.Condition()
        self._pending: str | None = None
        self._busy = False
        self._thread: threading.Thread | None = None

    def offer(self, text: str) -> None:
        with self._cond:
            self._pending = text
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vgpumon-nfd", daemon=True)
                self._thread.start()
            self._cond.notify()

    def settled(self, timeout: float) -> bool:
        """Wait until every text offered so far was written or failed; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                text, self._pending = self._pending, None
                self._busy = True
            try:
                if text is not None and self.writer.write(text):
                    self._written()
            except OSError as err:
                self._failed(err)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


def invalid_lines(text: str) -> list[str]:
    """Lines of a features file whose key or value is not valid as a Kubernetes label."""
    bad = []
    for key, value in parse(text).items():
        prefix, _, name = key.rpartition("/")
        ok = (
            prefix == PREFIX.rstrip("/")
            and LABEL_PART_RE.fullmatch(name) is not None
            and (value == "" or LABEL_PART_RE.fullmatch(value) is not None)
        )
        if not ok:
            bad.append(f"{key}={value}")
    return bad
