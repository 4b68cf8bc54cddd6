"""Snapshot -> Prometheus text 0.0.4 and OpenMetrics 1.0.0, both from one walk of the metric table.

docs/design.md, rule 1: formatting never calls NVML. :class:`Renderer` turns one immutable
:class:`~vgpumon.model.Snapshot` into both exposition formats using the table in
:mod:`vgpumon.metrics.table`.

Why not prometheus-client's encoders (which this module used to call): most of their time goes
to building ``Metric``/``Sample`` objects, validating names and escaping the same label values
again on every render (docs/measurements.md). Here a render formats only what changed since the
last one:

* a family's ``# HELP``/``# TYPE``/``# UNIT`` lines are formatted once, when the renderer is built;
* each scope of the table (the GPUs, the vGPUs, ...) is walked once per render, however many
  families it has (:class:`ScopeRows`); its entities' label sets (``{gpu="0",uuid="GPU-..."} ``)
  are made once and shared by the scope's families while the entities stay the same; when they
  change, what was made for those that stayed moves with them, and nothing is kept of one that
  left;
* the table says how a family's samples come out of its scope (``Family.rows``), so each kind has
  its plan: one value per entity (:class:`ValuePlan`), state sets and info families whose lines
  per entity are kept until the state or the labels change (:class:`StatePlan`,
  :class:`InfoPlan`), labelled samples (:class:`LabeledPlan`); families known only by their
  ``samples`` function (configured fields, the agentless hosts' view) by :class:`SamplesPlan`;
* values are formatted as prometheus-client formats them (``go_float``), only those that changed
  (compared bit for bit), all of a family's at once where many did (``go_floats``); a family
  with no change reuses the last render's bytes;
* a sample line is the same in both formats, so each family's lines are built once, as bytes, and
  shared: the two formats are sequences of parts holding the same lines objects (memory: one
  body, not two).

The output is byte-identical to prometheus-client's ``generate_latest`` and OpenMetrics
``generate_latest`` for every valid input (tests/metrics/test_renderer.py proves it for every
built-in scenario, for hostile label values and for one renderer fed snapshot after snapshot):
labels in name order, ``\\``, ``"`` and newline escaped in label values, ``\\`` and newline in
text-format HELP (plus ``"`` in OpenMetrics), other control characters passed through as
prometheus-client does. One deliberate difference: a string that is not valid Unicode (a lone
surrogate, as ``surrogateescape`` decoding of bad NVML bytes leaves) is written with U+FFFD
replacement characters, where prometheus-client raises and the whole scrape would fail.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import is_not, itemgetter, ne
from typing import Any, cast

from vgpumon.metrics.gofloat import go_float, go_floats
from vgpumon.metrics.hosts import Exported
from vgpumon.metrics.table import (
    COUNTER,
    FAMILIES,
    ExportOptions,
    Family,
    InfoValues,
    LabeledValues,
    LabelValues,
    OneValue,
    Scope,
    StateValues,
    walk_cache,
    walked,
)
from vgpumon.model import Snapshot

OPENMETRICS_EOF = b"# EOF\n"
CHANGED_FEW = 4  # at most one value in this many changed: those are formatted one by one


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


def _clean(values: Iterable[str]) -> bool:
    """None of ``values`` has anything to escape (plain ASCII without backslash, quote or
    newline, as most label values are): one look at them all together, not one per value."""
    joined = "".join(values)
    return joined.isascii() and "\\" not in joined and '"' not in joined and "\n" not in joined


def _escaped(values: Sequence[str]) -> Sequence[str]:
    """Label values escaped; ``values`` itself where none has anything to escape."""
    return values if _clean(values) else [_label_value(v) for v in values]


def _help_text(text: str) -> str:
    return _valid_text(text).replace("\\", r"\\").replace("\n", r"\n")


def _help_openmetrics(text: str) -> str:
    return _help_text(text).replace('"', r"\"")


def _literal(text: str) -> str:
    """``text`` inside a %-format, where it must stay as it is."""
    return text.replace("%", "%%")


class LabelTemplate:
    """A label set (``{gpu="%s",uuid="%s"} ``) as a %-format in prometheus-client's label order
    (sorted by name, whatever order the table gives), some values possibly fixed in advance.

    :meth:`pick` takes the label values (escaped, in the table's order) that fill the ``%s``.
    """

    __slots__ = ("pick", "text")

    def __init__(self, names: tuple[str, ...], fixed: dict[int, str] | None = None) -> None:
        fixed = fixed or {}
        by_name = sorted(range(len(names)), key=lambda i: names[i])
        inner = ",".join(
            f'{_literal(names[i])}="{_literal(fixed[i]) if i in fixed else "%s"}"' for i in by_name
        )
        self.text = f"{{{inner}}} " if names else " "
        self.pick = _picker(tuple(i for i in by_name if i not in fixed))

    def format(self, escaped: Sequence[str]) -> str:
        return self.text % self.pick(escaped)


def _picker(order: tuple[int, ...]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    """A function that takes the items at ``order`` out of a sequence, as a tuple, in C."""
    if not order:
        return lambda _: ()
    if len(order) == 1:
        return lambda values: (values[order[0]],)
    return cast(Callable[[Sequence[str]], tuple[str, ...]], itemgetter(*order))


class ScopeRows:
    """One scope of the table in the current render: its items, walked once, and their identity
    label values, escaped, kept while the scope's entities stay the same.

    ``generation`` changes whenever the entities (their identity labels, in walk order) differ
    from the previous render's: what a plan formatted per entity stays valid while it does not.
    ``moved`` then says where each entity was in the previous generation (-1: it is new), so
    that what was made for the entities that stayed is carried over, not made again.
    Nothing here outlives one snapshot's entities: the items are dropped at the end of a render,
    what was kept of entities that left is dropped as soon as they leave.
    """

    __slots__ = (
        "_escaped",
        "_label_sets",
        "generation",
        "items",
        "keys",
        "moved",
        "scope",
        "template",
    )

    def __init__(self, scope: Scope[Any]) -> None:
        self.scope = scope
        self.template = LabelTemplate(scope.labels)
        self.keys: list[LabelValues] = []
        self.items: list[Any] | None = None  # None: not walked in this render
        self.generation = 0
        self.moved: list[int] = []
        self._escaped: list[Sequence[str]] | None = None
        self._label_sets: list[str] | None = None

    def walk(self, snapshot: Snapshot, options: ExportOptions) -> list[Any]:
        """The scope's items in this render (walked at the first family that asks)."""
        if self.items is None:
            walk = list(walked(self.scope, snapshot, options))  # an iterator outside a render
            keys = [ids for ids, _ in walk]
            self.items = [item for _, item in walk]
            if keys != self.keys:
                where = {ids: i for i, ids in enumerate(self.keys)}
                self.moved = [where.get(ids, -1) for ids in keys]
                self.keys = keys
                self.generation += 1
                self._carry()
        return self.items

    def _carry(self) -> None:
        """The escaped labels and label sets of the entities that stayed, in their new places."""
        moved, escaped, label_sets = self.moved, self._escaped, self._label_sets
        self._escaped = self._label_sets = None
        if escaped is not None:
            self._escaped = [
                escaped[j] if j >= 0 else _escaped(ids)
                for j, ids in zip(moved, self.keys, strict=True)
            ]
        if label_sets is not None:
            made = self.escaped()
            self._label_sets = [
                label_sets[j] if j >= 0 else self.template.format(made[i])
                for i, j in enumerate(moved)
            ]

    def escaped(self) -> list[Sequence[str]]:
        """Each entity's identity label values, escaped (made once per generation)."""
        if self._escaped is None:
            keys = self.keys
            clean = _clean(chain.from_iterable(keys))
            self._escaped = list(keys) if clean else [_escaped(ids) for ids in keys]
        return self._escaped

    def label_sets(self) -> list[str]:
        """Each entity's label set of the identity labels alone, shared by the scope's families."""
        if self._label_sets is None:
            text, pick = self.template.text, self.template.pick
            self._label_sets = [text % pick(e) for e in self.escaped()]
        return self._label_sets


class RenderPass:
    """What one render's families share: the snapshot and the options."""

    __slots__ = ("options", "snapshot")

    def __init__(self, snapshot: Exported, options: ExportOptions) -> None:
        self.snapshot = snapshot
        self.options = options


class Plan:
    """One family's fixed parts (headers); subclasses say how its sample lines are made."""

    __slots__ = ("family", "openmetrics_header", "text_header")

    def __init__(self, family: Family) -> None:
        self.family = family
        text_name = family.name if family.type == COUNTER else family.base_name
        self.text_header = (
            f"# HELP {text_name} {_help_text(family.help)}\n# TYPE {text_name} {family.type}\n"
        ).encode()
        base = family.base_name
        om = f"# HELP {base} {_help_openmetrics(family.help)}\n# TYPE {base} {family.type}\n"
        if family.unit:
            om += f"# UNIT {base} {family.unit}\n"
        self.openmetrics_header = om.encode()

    def lines(self, render: RenderPass) -> bytes:
        """This family's sample lines, UTF-8 (empty when it has none)."""
        raise NotImplementedError

    def end_render(self) -> None:
        """The render is over (or abandoned)."""


class ScopePlan(Plan):
    """A family whose rows the table describes (``Family.rows``): what it formats per entity of
    its scope is kept while the scope's entities stay the same (one generation of
    :class:`ScopeRows`), and forgotten when they change."""

    __slots__ = ("_generation", "_lines", "rows")

    def __init__(self, family: Family, rows: ScopeRows) -> None:
        super().__init__(family)
        self.rows = rows
        self._generation = -1
        self._lines = b""  # the last render's lines, reused when nothing in them changed

    def items(self, render: RenderPass) -> list[Any]:
        """The scope's items; on a new generation, what was kept per entity is carried over to
        the entities that stayed (or, where this family missed a generation, dropped)."""
        rows = self.rows
        items = rows.walk(cast(Snapshot, render.snapshot), render.options)
        if self._generation != rows.generation:
            if self._generation == rows.generation - 1:
                self.carry(rows.moved)
            else:
                self.forget(len(items))
            self._generation = rows.generation
        return items

    def forget(self, entities: int) -> None:
        """Drop what was kept of the previous entities; make room for ``entities`` new ones."""
        self._lines = b""

    def carry(self, moved: list[int]) -> None:
        """Keep what was kept of the entities that stayed (``ScopeRows.moved``)."""
        self.forget(len(moved))

    def end_render(self) -> None:
        if self._generation != self.rows.generation:  # the entities changed without this family
            self._generation = -1
            self.forget(0)


class ValueTexts:
    """A family's values in the last render, as doubles (compared bit for bit: -0.0 is not 0.0)
    and as written, so that a render formats only the values that changed."""

    __slots__ = ("_bits", "_texts")

    def __init__(self) -> None:
        self._bits = b""
        self._texts: list[str] = []

    def forget(self) -> None:
        self._bits, self._texts = b"", []

    def update(self, values: list[Any], same_lines: bool) -> list[str] | None:
        """``values`` as written; None when they are the last render's, in the same lines
        (``same_lines``: the i-th value belongs to the same line as the last render's i-th)."""
        bits = array("d", values).tobytes()
        if same_lines and bits == self._bits:
            return None
        texts: list[str] | None = None
        if same_lines and len(bits) == len(self._bits):
            # Where few values changed, format only those (one by one); where many did, all of
            # them at once is cheaper.
            old, new = array("q", self._bits), array("q", bits)
            if sum(map(ne, new, old)) * CHANGED_FEW <= len(values):
                texts = self._texts.copy()
                for i in compress(range(len(values)), map(ne, new, old)):
                    texts[i] = go_float(values[i])
        if texts is None:
            texts = go_floats(values)
        self._bits, self._texts = bits, texts
        return texts


class ValuePlan(ScopePlan):
    """A family of one sample per entity (gauges, counters): its lines are the family's name,
    the scope's label sets (made once per generation, shared by the scope's families) and the
    values, of which a render formats only those that changed; when none did, the family's
    lines are the last render's.
    """

    __slots__ = ("_present", "_values", "value")

    def __init__(self, family: Family, rows: ScopeRows, source: OneValue[Any]) -> None:
        super().__init__(family, rows)
        self.value = source.value
        self._present = b""  # which entities had a value in the last render (b"": all)
        self._values = ValueTexts()

    def forget(self, entities: int) -> None:
        super().forget(entities)
        self._present = b""
        self._values.forget()

    def lines(self, render: RenderPass) -> bytes:
        got = list(map(self.value, self.items(render)))
        absent = got.count(None)
        if absent == len(got):
            self.forget(0)
            return b""
        label_sets = self.rows.label_sets()
        present = b""
        if absent:  # only the entities with a value have a line
            mask = list(map(is_not, got, repeat(None)))
            label_sets = list(compress(label_sets, mask))
            got = list(compress(got, mask))
            present = array("b", mask).tobytes()
        texts = self._values.update(got, present == self._present)
        if texts is None:
            return self._lines
        n = len(got)
        parts = [self.family.name] * (4 * n)  # name, label set, value, newline: by slicing
        parts[1::4] = label_sets
        parts[2::4] = texts
        parts[3::4] = ["\n"] * n
        self._lines, self._present = "".join(parts).encode(), present
        return self._lines


class BlockPlan(ScopePlan):
    """A family whose lines per entity rarely change (state sets, info families): each entity's
    lines are kept with what they were made from (its ``key``) and made again only when that
    changes; when no entity's did, the family's lines are the last render's."""

    __slots__ = ("_blocks", "_keys", "_whole")

    def __init__(self, family: Family, rows: ScopeRows) -> None:
        super().__init__(family, rows)
        self._keys: list[Any] = []  # per entity, what its lines were made from (None: none)
        self._blocks: list[bytes | None] = []  # and those lines, UTF-8
        self._whole = True  # the family's lines are the blocks of these keys, in this order

    def forget(self, entities: int) -> None:
        super().forget(entities)
        self._keys = [None] * entities
        self._blocks = [None] * entities
        self._whole = True

    def carry(self, moved: list[int]) -> None:
        keys, blocks = self._keys, self._blocks
        self._keys = [keys[j] if j >= 0 else None for j in moved]
        self._blocks = [blocks[j] if j >= 0 else None for j in moved]
        self._whole = False  # entities left or moved: the lines are made again from the blocks

    def key(self, item: Any) -> Any:
        """What the entity's lines are made from (None: it has none)."""
        raise NotImplementedError

    def made(self, escaped: list[Sequence[str]], keys: list[Any]) -> list[str]:
        """The lines of entities (their escaped identity label values) from their keys (not
        None), all at once: on a first render, every entity's."""
        raise NotImplementedError

    def lines(self, render: RenderPass) -> bytes:
        keys = list(map(self.key, self.items(render)))
        if keys == self._keys and self._whole:  # compared in C, entity by entity
            return self._lines
        blocks = self._blocks
        changed = list(compress(range(len(keys)), map(ne, keys, self._keys)))
        for i in changed:
            blocks[i] = None
        changed = [i for i in changed if keys[i] is not None]
        if changed:
            escaped = self.rows.escaped()
            made = self.made([escaped[i] for i in changed], [keys[i] for i in changed])
            for i, block in zip(changed, made, strict=True):
                blocks[i] = block.encode()
        self._keys, self._whole = keys, True
        # Bytes joined at once: one allocation of the family's lines, not a str and its copy.
        self._lines = b"".join(filter(None, blocks))
        return self._lines


class StatePlan(BlockPlan):
    """A state set: an entity's lines depend only on its current state. A template of all its
    lines per state, the state labels and values already in place, leaves only the identity
    labels to fill in."""

    __slots__ = ("_templates", "_unknown", "current", "states")

    def __init__(self, family: Family, rows: ScopeRows, source: StateValues[Any]) -> None:
        super().__init__(family, rows)
        self.current = source.current
        self.states = source.states
        self._templates = {now: self._template(now) for now in self.states}
        self._unknown = self._template(None)  # a state outside the list: every state 0

    def _template(self, now: str | None) -> str:
        at = len(self.rows.scope.labels)  # the state label comes after the identity labels
        name = _literal(self.family.name)
        labels = self.family.labels
        return "".join(
            f"{name}{LabelTemplate(labels, {at: _label_value(st)}).text}"
            f"{'1.0' if st == now else '0.0'}\n"
            for st in self.states
        )

    def key(self, item: Any) -> Any:
        return self.current(item)

    def made(self, escaped: list[Sequence[str]], keys: list[Any]) -> list[str]:
        pick, templates, unknown, n = (
            self.rows.template.pick,
            self._templates,
            self._unknown,
            len(self.states),
        )
        return [
            templates.get(k, unknown) % (pick(e) * n) for e, k in zip(escaped, keys, strict=True)
        ]


class InfoPlan(BlockPlan):
    """An info family: one line of value 1 per entity, made again only when its labels change."""

    __slots__ = ("template", "values")

    def __init__(self, family: Family, rows: ScopeRows, source: InfoValues[Any]) -> None:
        super().__init__(family, rows)
        self.values = source.values
        self.template = LabelTemplate(family.labels)

    def key(self, item: Any) -> Any:
        # The raw values (str, int or None, never bool): equal ones print the same.
        return self.values(item)

    def made(self, escaped: list[Sequence[str]], keys: list[Any]) -> list[str]:
        texts = [
            ["" if v is None else str(v) for v in key] if None in key else [*map(str, key)]
            for key in keys
        ]
        if _clean(chain.from_iterable(texts)):  # one look at all of them
            labels = [(*e, *t) for e, t in zip(escaped, texts, strict=True)]
        else:
            labels = [(*e, *_escaped(t)) for e, t in zip(escaped, texts, strict=True)]
        name, text, pick = self.family.name, self.template.text, self.template.pick
        return [f"{name}{text % pick(label)}1.0\n" for label in labels]


class LabeledPlan(ScopePlan):
    """A family of several samples per entity told apart by extra labels (sensor, clock, ...):
    each entity's lines up to their values are kept while its extra label values stay the same,
    and a render formats only the values that changed.
    """

    __slots__ = ("_line_prefixes", "_prefixes", "_values", "template", "values")

    def __init__(self, family: Family, rows: ScopeRows, source: LabeledValues[Any]) -> None:
        super().__init__(family, rows)
        self.values = source.values
        self.template = LabelTemplate(family.labels)
        self._prefixes: list[tuple[list[Sequence[str]], list[str]] | None] = []  # per entity
        self._line_prefixes: list[str] = []  # of the last render's lines
        self._values = ValueTexts()

    def forget(self, entities: int) -> None:
        super().forget(entities)
        self._prefixes = [None] * entities
        self._line_prefixes = []
        self._values.forget()

    def carry(self, moved: list[int]) -> None:
        # The lines and values stay too: they are reused only where the new lines' prefixes
        # and values are all the same as theirs.
        prefixes = self._prefixes
        self._prefixes = [prefixes[j] if j >= 0 else None for j in moved]

    def lines(self, render: RenderPass) -> bytes:
        items = self.items(render)  # first: a new generation replaces the kept prefixes
        kept_prefixes = self._prefixes
        prefixes: list[str] = []
        values: list[Any] = []
        for i, item in enumerate(items):
            got = [(labels, value) for labels, value in self.values(item) if value is not None]
            if not got:
                continue
            labels = [labels for labels, _ in got]
            kept = kept_prefixes[i]
            if kept is None or kept[0] != labels:
                kept = kept_prefixes[i] = (labels, self._prefixes_of(i, labels))
            prefixes += kept[1]
            values += [value for _, value in got]
        if not values:
            self._lines, self._line_prefixes = b"", []
            self._values.forget()
            return b""
        texts = self._values.update(values, prefixes == self._line_prefixes)
        if texts is None:
            return self._lines
        parts = [""] * (3 * len(values))  # prefix, value, newline: by slicing
        parts[::3] = prefixes
        parts[1::3] = texts
        parts[2::3] = ["\n"] * len(values)
        self._lines, self._line_prefixes = "".join(parts).encode(), prefixes
        return self._lines

    def _prefixes_of(self, entity: int, extra: list[Sequence[str]]) -> list[str]:
        name, template, escaped = self.family.name, self.template, self.rows.escaped()[entity]
        return [name + template.format((*escaped, *_escaped(labels))) for labels in extra]


class LabelSets:
    """Formatted label sets (``{gpu="0",uuid="GPU-..."} ``) of one tuple of label names, for
    families that only say their samples through ``Family.samples`` (configured extra fields,
    the agentless hosts' families).

    Shared by every such family with those names. Entries the last render did not use are
    dropped at the next one, so the cache never outgrows a snapshot.
    """

    __slots__ = ("current", "previous", "template")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.template = LabelTemplate(names)
        self.current: dict[LabelValues, str] = {}
        self.previous: dict[LabelValues, str] = {}

    def new_render(self) -> None:
        """What the last render used may be reused by this one."""
        self.previous, self.current = self.current, {}

    def end_render(self) -> None:
        """What the last render used and this one did not is forgotten (and its key tuples)."""
        self.previous = {}

    def format(self, labels: LabelValues) -> str:
        return self.template.format(_escaped(labels))


class SamplesPlan(Plan):
    """A family known only by its ``samples`` function: label sets cached by label values."""

    __slots__ = ("label_sets",)

    def __init__(self, family: Family, label_sets: LabelSets) -> None:
        super().__init__(family)
        self.label_sets = label_sets

    def lines(self, render: RenderPass) -> bytes:
        sets = self.label_sets
        current, previous = sets.current, sets.previous
        name = self.family.name
        prefixes: list[str] = []
        values: list[float] = []
        # A family's samples read the snapshot it was made for: the table's a Snapshot, the
        # agentless hosts' (vgpumon.metrics.hosts) a HostsView; the renderer is built for one.
        for labels, value in self.family.samples(cast(Snapshot, render.snapshot), render.options):
            label_set = current.get(labels)
            if label_set is None:
                label_set = previous.get(labels)
                if label_set is None:
                    label_set = sets.format(labels)
                current[labels] = label_set
            prefixes.append(label_set)
            values.append(value)
        if not values:
            return b""
        parts = [name] * (4 * len(values))
        parts[1::4] = prefixes
        parts[2::4] = go_floats(values)
        parts[3::4] = ["\n"] * len(values)
        return "".join(parts).encode()


def plans_of(families: tuple[Family, ...]) -> tuple[Plan, ...]:
    """A plan per family: those of one scope share its walk and escaped labels, those known
    only by their samples share one :class:`LabelSets` per tuple of label names."""
    scopes: dict[int, ScopeRows] = {}
    label_sets: dict[tuple[str, ...], LabelSets] = {}
    plans: list[Plan] = []
    for family in families:
        source = family.rows
        if source is None:
            shared = label_sets.setdefault(family.labels, LabelSets(family.labels))
            plans.append(SamplesPlan(family, shared))
            continue
        rows = scopes.setdefault(id(source.scope), ScopeRows(source.scope))
        if isinstance(source, OneValue):
            plans.append(ValuePlan(family, rows, source))
        elif isinstance(source, StateValues):
            plans.append(StatePlan(family, rows, source))
        elif isinstance(source, InfoValues):
            plans.append(InfoPlan(family, rows, source))
        else:
            plans.append(LabeledPlan(family, rows, source))
    return tuple(plans)


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
    """Renders snapshots for one set of export options, keeping between snapshots what did not
    change.

    Not thread-safe: one renderer belongs to one publisher (the server has exactly one).
    :meth:`steps` lets an event loop interleave other work between families; :meth:`render` runs
    it to the end. A render that starts while another is under way (the publisher may render on
    ask while it renders ahead) gets a renderer of its own: what this one keeps is one render's.
    """

    def __init__(
        self, options: ExportOptions | None = None, families: tuple[Family, ...] = FAMILIES
    ) -> None:
        self._table = families
        self._rendering = False
        self.options = options or ExportOptions()
        # The table's families, then those the options bring (configured NVML fields).
        self.families = families + self.options.families if self.options.families else families
        self.plans = plans_of(self.families)
        scoped = [p for p in self.plans if isinstance(p, ScopePlan)]
        self._scopes = tuple({id(p.rows): p.rows for p in scoped}.values())
        known_by_samples = [p for p in self.plans if isinstance(p, SamplesPlan)]
        self._label_sets = tuple(
            {id(p.label_sets): p.label_sets for p in known_by_samples}.values()
        )

    def steps(
        self, snapshot: Exported, slice_seconds: float, tail: tuple[str, str] = ("", "")
    ) -> Iterator[Exposition | None]:
        """Render ``snapshot``, yielding None after about ``slice_seconds`` of work each time.

        The last item is the :class:`Exposition`. ``tail`` (text, OpenMetrics) is appended after
        the table's families: families from outside the table, such as ``process_*``.
        """
        if self._rendering:
            yield from Renderer(self.options, self._table).steps(snapshot, slice_seconds, tail)
            return
        self._rendering = True
        # Both formats share every family's lines (the same bytes object); only the headers
        # differ, and those are the plans' own, made once.
        text: list[bytes] = []
        om: list[bytes] = []
        render = RenderPass(snapshot, self.options)
        started = time.perf_counter()
        for label_sets in self._label_sets:
            label_sets.new_render()
        try:
            with walk_cache():  # each scope walked once, not once per family
                for plan in self.plans:
                    lines = plan.lines(render)
                    if lines:
                        text += (plan.text_header, lines)
                        om += (plan.openmetrics_header, lines)
                    if time.perf_counter() - started >= slice_seconds:
                        yield None
                        started = time.perf_counter()
        finally:  # also when the render is abandoned: nothing of this snapshot is kept
            for rows in self._scopes:
                rows.items = None
            for plan in self.plans:
                plan.end_render()
            for label_sets in self._label_sets:
                label_sets.end_render()
            self._rendering = False
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
