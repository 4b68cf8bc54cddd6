"""Snapshot -> Prometheus text 0.0.4 and OpenMetrics 1.0.0, both from one walk of the metric table.

docs/design.md, rule 1: formatting never calls NVML. :class:`Renderer` turns one immutable
:class:`~vgpumon.model.Snapshot` into both exposition formats using the table in
:mod:`vgpumon.export.metrics`.

Why not prometheus-client's encoders (which this module used to call): on a 16 GPU x 48 vGPU host
they took 190-264 ms per format and snapshot, most of it building ``Metric``/``Sample`` objects,
validating names and escaping the same label values again every second. Here:

* a family's ``# HELP``/``# TYPE``/``# UNIT`` lines are formatted once, when the renderer is built;
* an entity's label set (``name{gpu="0",uuid="GPU-..."} ``) is formatted once and reused while the
  entity exists (the cache is keyed by the label values, so a changed identity is a new entry, and
  entries no longer in the snapshot are dropped at the next render);
* only values are formatted per snapshot, with prometheus-client's own ``floatToGoString``;
* a sample line is the same in both formats, so each family's lines are built once and shared.

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

from prometheus_client.utils import floatToGoString

from vgpumon.export.metrics import COUNTER, FAMILIES, ExportOptions, Family, LabelValues
from vgpumon.model import Snapshot

OPENMETRICS_EOF = "# EOF\n"
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


class FamilyPlan:
    """One family's fixed parts (headers, label order) and its cache of formatted label sets."""

    __slots__ = ("_order", "_prefixes", "family", "openmetrics_header", "text_header")

    def __init__(self, family: Family) -> None:
        self.family = family
        text_name = family.name if family.type == COUNTER else family.base_name
        self.text_header = (
            f"# HELP {text_name} {_help_text(family.help)}\n# TYPE {text_name} {family.type}\n"
        )
        base = family.base_name
        om = f"# HELP {base} {_help_openmetrics(family.help)}\n# TYPE {base} {family.type}\n"
        if family.unit:
            om += f"# UNIT {base} {family.unit}\n"
        self.openmetrics_header = om
        # prometheus-client writes labels sorted by name, whatever order the table gives.
        self._order = tuple(sorted(range(len(family.labels)), key=lambda i: family.labels[i]))
        self._prefixes: dict[LabelValues, str] = {}

    def _prefix(self, labels: LabelValues) -> str:
        if not labels:
            return f"{self.family.name} "
        names = self.family.labels
        inner = ",".join(f'{names[i]}="{_label_value(labels[i])}"' for i in self._order)
        return f"{self.family.name}{{{inner}}} "

    def lines(self, snapshot: Snapshot, options: ExportOptions, values: dict[float, str]) -> str:
        """This family's sample lines for ``snapshot`` ("" when it has none).

        ``values`` memoises formatted values across families (0 and 1 dominate: state sets,
        flags, info families).
        """
        old = self._prefixes
        seen: dict[LabelValues, str] = {}
        out: list[str] = []
        for labels, value in self.family.samples(snapshot, options):
            prefix = seen.get(labels)
            if prefix is None:
                prefix = old.get(labels)
                if prefix is None:
                    prefix = self._prefix(labels)
                seen[labels] = prefix
            formatted = values.get(value)
            if formatted is None or value == 0.0:  # 0.0 == -0.0, but they print differently
                formatted = floatToGoString(value)
                if len(values) < VALUE_MEMO_SIZE:
                    values[value] = formatted
            out.append(f"{prefix}{formatted}\n")
        # Only label sets of entities still present survive: the cache never outgrows a snapshot.
        self._prefixes = seen
        return "".join(out)


@dataclass(frozen=True)
class Exposition:
    """Both formats of one snapshot, as UTF-8 bytes."""

    text: bytes  # text format 0.0.4
    openmetrics: bytes  # OpenMetrics 1.0.0, ``# EOF`` included


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
        self.plans = tuple(FamilyPlan(f) for f in self.families)
        self._other: tuple[tuple[Family, ...], tuple[FamilyPlan, ...]] | None = None

    def _plans_for(self, snapshot: Snapshot) -> tuple[FamilyPlan, ...]:
        """The plans for the snapshot's table: a snapshot-like object may bring its own families
        (several agentless hosts, series labelled ``host``: :mod:`vgpumon.export.hosts`)."""
        families = getattr(snapshot, "families", None)
        if families is None or families is self.families:
            return self.plans
        if self._other is None or self._other[0] is not families:
            self._other = (families, tuple(FamilyPlan(f) for f in families))
        return self._other[1]

    def steps(
        self, snapshot: Snapshot, slice_seconds: float, tail: tuple[str, str] = ("", "")
    ) -> Iterator[Exposition | None]:
        """Render ``snapshot``, yielding None after about ``slice_seconds`` of work each time.

        The last item is the :class:`Exposition`. ``tail`` (text, OpenMetrics) is appended after
        the table's families: families from outside the table, such as ``process_*``.
        """
        text: list[str] = []
        om: list[str] = []
        values: dict[float, str] = {}
        started = time.perf_counter()
        for plan in self._plans_for(snapshot):
            lines = plan.lines(snapshot, self.options, values)
            if lines:
                text += (plan.text_header, lines)
                om += (plan.openmetrics_header, lines)
            if time.perf_counter() - started >= slice_seconds:
                yield None
                started = time.perf_counter()
        text.append(tail[0])
        om += (tail[1], OPENMETRICS_EOF)
        yield Exposition("".join(text).encode("utf-8"), "".join(om).encode("utf-8"))

    def render(self, snapshot: Snapshot) -> Exposition:
        """Both formats of ``snapshot`` in one go."""
        *_, result = self.steps(snapshot, float("inf"))
        if result is None:  # cannot happen: steps() always ends with the exposition
            raise RuntimeError("renderer ended without an exposition")
        return result


def render(
    snapshot: Snapshot, *, openmetrics: bool = False, options: ExportOptions | None = None
) -> bytes:
    """The exposition of one snapshot: text format 0.0.4, or OpenMetrics 1.0.0."""
    exposition = Renderer(options).render(snapshot)
    return exposition.openmetrics if openmetrics else exposition.text
