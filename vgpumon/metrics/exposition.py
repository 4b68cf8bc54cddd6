"""Snapshot -> Prometheus text 0.0.4 and OpenMetrics 1.0.0, both from one walk of the metric table.

docs/design.md, rule 1: formatting never calls NVML. :class:`Renderer` turns one immutable
:class:`~vgpumon.model.Snapshot` into both exposition formats using the table in
:mod:`vgpumon.metrics.table`.

Why not prometheus-client's encoders (which this module used to call): most of their time goes
to building ``Metric``/``Sample`` objects, validating names and escaping the same label values
again on every render (docs/measurements.md). Here:

* a family's ``# HELP``/``# TYPE``/``# UNIT`` lines are formatted once, when the renderer is built;
* an entity's label set (``{gpu="0",uuid="GPU-..."} ``) is formatted once and reused while the
  entity exists, by every family with the same label names (the cache is keyed by the label
  values, so a changed identity is a new entry, and entries no longer in the snapshot are dropped
  at the end of the render);
* each scope of the table (the GPUs, the vGPUs, ...) is walked once per render, however many
  families it has (:func:`vgpumon.metrics.table.walk_cache`);
* only values are formatted per snapshot, as prometheus-client formats them (``go_float``);
* a sample line is the same in both formats, so each family's lines are built once, as bytes, and
  shared: the two formats are sequences of parts holding the same lines objects (memory: one
  body, not two).

The output is byte-identical to prometheus-client's ``generate_latest`` and OpenMetrics
``generate_latest`` for every valid input (tests/export/test_export_renderer.py proves it for every
built-in scenario and for hostile label values): labels in name order, ``\\``, ``"`` and newline
escaped in label values, ``\\`` and newline in text-format HELP (plus ``"`` in OpenMetrics), other
control characters passed through as prometheus-client does. One deliberate difference: a string
that is not valid Unicode (a lone surrogate, as ``surrogateescape`` decoding of bad NVML bytes
leaves) is written with U+FFFD replacement characters, where prometheus-client raises and the
whole scrape would fail.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from vgpumon.metrics.gofloat import go_float
from vgpumon.metrics.hosts import Exported
from vgpumon.metrics.table import (
    COUNTER,
    FAMILIES,
    ExportOptions,
    Family,
    LabelValues,
    walk_cache,
)
from vgpumon.model import Snapshot

OPENMETRICS_EOF = b"# EOF\n"
VALUE_MEMO_SIZE = 4096  # distinct formatted values remembered per render


def _valid_text(value: str) -> str:
    """``value`` unchanged when it is valid Unicode, else with U+FFFD for each bad byte."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        try:  # surrogateescape'd bytes: restore them, then decode with replacement characters
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # other lone surrogates
            return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _label_value(value: str) -> str:
    return _valid_text(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _help_text(text: str) -> str:
    return _valid_text(text).replace("\\", r"\\").replace("\n", r"\n")


def _help_openmetrics(text: str) -> str:
    return _help_text(text).replace('"', r"\"")


class LabelSets:
    """Formatted label sets (``{gpu="0",uuid="GPU-..."} ``) of one tuple of label names.

    Shared by every family with those names: the vGPU families format each vGPU's label set once,
    not once per family. Entries the last render did not use are dropped at the next one, so the
    cache never outgrows a snapshot.
    """

    __slots__ = ("_names", "_order", "current", "previous")

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        # prometheus-client writes labels sorted by name, whatever order the table gives.
        self._order = tuple(sorted(range(len(names)), key=lambda i: names[i]))
        self.current: dict[LabelValues, str] = {}
        self.previous: dict[LabelValues, str] = {}

    def new_render(self) -> None:
        """What the last render used may be reused by this one."""
        self.previous, self.current = self.current, {}

    def end_render(self) -> None:
        """What the last render used and this one did not is forgotten (and its key tuples)."""
        self.previous = {}

    def format(self, labels: LabelValues) -> str:
        if not labels:
            return " "
        names = self._names
        inner = ",".join(f'{names[i]}="{_label_value(labels[i])}"' for i in self._order)
        return f"{{{inner}}} "


class FamilyPlan:
    """One family's fixed parts (headers) and the shared cache of its label sets."""

    __slots__ = ("family", "label_sets", "openmetrics_header", "text_header")

    def __init__(self, family: Family, label_sets: LabelSets | None = None) -> None:
        self.family = family
        self.label_sets = label_sets if label_sets is not None else LabelSets(family.labels)
        text_name = family.name if family.type == COUNTER else family.base_name
        self.text_header = (
            f"# HELP {text_name} {_help_text(family.help)}\n# TYPE {text_name} {family.type}\n"
        ).encode()
        base = family.base_name
        om = f"# HELP {base} {_help_openmetrics(family.help)}\n# TYPE {base} {family.type}\n"
        if family.unit:
            om += f"# UNIT {base} {family.unit}\n"
        self.openmetrics_header = om.encode()

    def lines(self, snapshot: Exported, options: ExportOptions, values: dict[float, str]) -> bytes:
        """This family's sample lines for ``snapshot``, UTF-8 (empty when it has none).

        ``values`` memoises formatted values across families (0 and 1 dominate: state sets,
        flags, info families).
        """
        sets = self.label_sets
        current, previous = sets.current, sets.previous
        name = self.family.name
        out: list[str] = []
        # A family's samples read the snapshot it was made for: the table's a Snapshot, the
        # agentless hosts' (vgpumon.metrics.hosts) a HostsView; the renderer is built for one.
        for labels, value in self.family.samples(cast(Snapshot, snapshot), options):
            label_set = current.get(labels)
            if label_set is None:
                label_set = previous.get(labels)
                if label_set is None:
                    label_set = sets.format(labels)
                current[labels] = label_set
            formatted = values.get(value)
            if formatted is None or value == 0.0:  # 0.0 == -0.0, but they print differently
                formatted = go_float(value)
                if len(values) < VALUE_MEMO_SIZE:
                    values[value] = formatted
            out += (name, label_set, formatted, "\n")  # no string per line: one join below
        return "".join(out).encode()


def plans_of(families: tuple[Family, ...]) -> tuple[FamilyPlan, ...]:
    """A plan per family, families with the same label names sharing one :class:`LabelSets`."""
    shared: dict[tuple[str, ...], LabelSets] = {}
    return tuple(FamilyPlan(f, shared.setdefault(f.labels, LabelSets(f.labels))) for f in families)


Body = tuple[bytes, ...]  # a body as the byte strings to send one after the other


@dataclass(frozen=True)
class Exposition:
    """Both formats of one snapshot, UTF-8, each as the parts to send one after the other.

    The formats differ only in the families' header lines and the end (``# EOF``): both hold the
    very same bytes object of each family's sample lines, so the two cost about one body's
    memory, not two.
    """

    text_parts: Body  # text format 0.0.4
    openmetrics_parts: Body  # OpenMetrics 1.0.0, ``# EOF`` included

    @property
    def text(self) -> bytes:
        return b"".join(self.text_parts)

    @property
    def openmetrics(self) -> bytes:
        return b"".join(self.openmetrics_parts)


class Renderer:
    """Renders snapshots for one set of export options, reusing label sets between snapshots.

    Not thread-safe: one renderer belongs to one publisher (the server has exactly one).
    :meth:`steps` lets an event loop interleave other work between families; :meth:`render` runs
    it to the end.
    """

    def __init__(
        self, options: ExportOptions | None = None, families: tuple[Family, ...] = FAMILIES
    ) -> None:
        self.options = options or ExportOptions()
        # The table's families, then those the options bring (configured NVML fields).
        self.families = families + self.options.families if self.options.families else families
        self.plans = plans_of(self.families)

    def steps(
        self, snapshot: Exported, slice_seconds: float, tail: tuple[str, str] = ("", "")
    ) -> Iterator[Exposition | None]:
        """Render ``snapshot``, yielding None after about ``slice_seconds`` of work each time.

        The last item is the :class:`Exposition`. ``tail`` (text, OpenMetrics) is appended after
        the table's families: families from outside the table, such as ``process_*``.
        """
        # Both formats share every family's lines (the same bytes object); only the headers
        # differ, and those are the plans' own, made once.
        text: list[bytes] = []
        om: list[bytes] = []
        values: dict[float, str] = {}
        started = time.perf_counter()
        plans = self.plans
        shared = {id(p.label_sets): p.label_sets for p in plans}.values()
        for label_sets in shared:
            label_sets.new_render()
        with walk_cache():  # each scope walked once, not once per family
            for plan in plans:
                lines = plan.lines(snapshot, self.options, values)
                if lines:
                    text += (plan.text_header, lines)
                    om += (plan.openmetrics_header, lines)
                if time.perf_counter() - started >= slice_seconds:
                    yield None
                    started = time.perf_counter()
        for label_sets in shared:
            label_sets.end_render()
        text.append(tail[0].encode())
        om += (tail[1].encode(), OPENMETRICS_EOF)
        yield Exposition(tuple(text), tuple(om))

    def render(self, snapshot: Exported) -> Exposition:
        """Both formats of ``snapshot`` in one go."""
        *_, result = self.steps(snapshot, float("inf"))
        if result is None:  # cannot happen: steps() always ends with the exposition
            raise RuntimeError("renderer ended without an exposition")
        return result


def render(
    snapshot: Exported,
    *,
    openmetrics: bool = False,
    options: ExportOptions | None = None,
    families: tuple[Family, ...] = FAMILIES,
) -> bytes:
    """The exposition of one snapshot: text format 0.0.4, or OpenMetrics 1.0.0."""
    exposition = Renderer(options, families).render(snapshot)
    return exposition.openmetrics if openmetrics else exposition.text
