"""The filter grammar: ``vm:render license:unlicensed type:L40S mode:mig`` plus free words.

A query is space-separated terms. ``field:value`` keeps rows whose ``field`` contains ``value``
(case-insensitive); a bare word keeps rows where any field contains it. All terms must hold. A
value may be quoted (``vm:"my vm"``). A parent row (a GPU, a host) is kept when it matches by
itself or when one of its children does, so ``vm:render`` shows the GPUs that serve that VM with
only the matching vGPUs under them.

``fits:TYPE`` is the one term that is not a substring match: it keeps the GPUs (with what runs
on them, and the hosts with such a GPU) where one more vGPU of that type or MIG instance of that
profile can be created now, named in full or short (``fits:l40s-8q``, ``fits:"NVIDIA L40S-8Q"``,
``fits:1g.10gb``), so that ``fits:L40S-8Q`` does not also take the GPUs with room for an
``L40S-48Q``. A GPU row's ``fits`` field lists those names (:data:`FITS_SEPARATOR` between them)
and its vGPU and MIG rows carry the same list; the capacity screen orders such GPUs best fit
first (:func:`vgpumon.view.capacity.fit_rows`).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from vgpumon.errors import ConfigError

FIELDS = (
    "host", "gpu", "name", "uuid", "mode", "badge", "vm", "type", "class", "license", "policy",
    "vgpu", "profile", "gi", "pid", "process", "kind", "state", "pod", "ns", "user", "fits",
)  # fmt: skip
# Between the names of a row's ``fits`` field (a type name has spaces, never a comma).
FITS_SEPARATOR = ","


@dataclass(frozen=True)
class Query:
    terms: tuple[tuple[str, str], ...] = ()  # (field, lowercase value)
    words: tuple[str, ...] = ()  # lowercase

    @property
    def empty(self) -> bool:
        return not self.terms and not self.words

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Every term holds for this row's fields (a field the row lacks never holds)."""
        for name, value in self.terms:
            if name == "fits":
                if value not in fields.get(name, "").lower().split(FITS_SEPARATOR):
                    return False
            elif value not in fields.get(name, "").lower():
                return False
        return all(any(word in v.lower() for v in fields.values()) for word in self.words)

    def matches_any(self, candidates: Iterable[Mapping[str, str]]) -> bool:
        return any(self.matches(c) for c in candidates)

    def values(self, name: str) -> tuple[str, ...]:
        """The values of this query's ``name:`` terms (lower case), in order."""
        return tuple(v for k, v in self.terms if k == name)

    def without(self, name: str) -> Query:
        """This query less its ``name:`` terms."""
        return Query(tuple(t for t in self.terms if t[0] != name), self.words)

    def __str__(self) -> str:
        parts = [f"{k}:{shlex.quote(v)}" for k, v in self.terms]
        return " ".join(parts + [shlex.quote(w) for w in self.words])


def parse(text: str) -> Query:
    """Parse a query; an unknown field or unbalanced quote is a :class:`ConfigError` (one line)."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"filter: {exc}") from None
    terms: list[tuple[str, str]] = []
    words: list[str] = []
    for token in tokens:
        name, sep, value = token.partition(":")
        if sep and name:
            name = name.lower()
            if name not in FIELDS:
                raise ConfigError(f"filter: unknown field {name!r}; fields: {', '.join(FIELDS)}")
            terms.append((name, value.lower()))
        elif token:
            words.append(token.lower())
    return Query(tuple(terms), tuple(words))
