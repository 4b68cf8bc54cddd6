"""hypothesis strategies for the fuzzers of the YAML loaders and the command line.

Two kinds of input: raw text or bytes (anything at all), and *mutations of valid documents* (a
built-in scenario, a full serve config, a full web-config with a key or value replaced, removed
or added), which reach far deeper into the validators than random text ever does. Values lean
toward the edges that once broke vgpumon: huge and non-finite numbers, negative ones, unit
strings (``1e309GiB``), NUL bytes, lone surrogate escapes, paths to FIFOs and devices.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import strategies as st

UNITS = [
    "",
    "B",
    "K",
    "KiB",
    "G",
    "GiB",
    "GB",
    "TiB",
    "PiB",
    "W",
    "mW",
    "kW",
    "MW",
    "MHz",
    "GHz",
    "Hz",
    "C",
    "°C",
    "%",
    "ns",
    "us",
    "µs",
    "ms",
    "s",
    "m",
    "min",
    "h",
    "d",
    "/s",
    "MiB/s",
    "x",
]
NASTY_TEXT = [
    "",
    " ",
    "\0",
    "a\0b",
    "\\ud800",
    "1e309",
    "-1",
    "nan",
    ".inf",
    "-.inf",
    "0x1F",
    "~",
    "/dev/zero",
    "/dev/null",
    "/",
    ".",
    "*",
    "&a",
    "<<",
    "!!python/object:os.system",
]

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**50, 2**50 + 1, 2**64, 2**64 - 1, 1e308, 1e-9, 1e30]),
)
unit_strings = st.builds(
    lambda n, u: f"{n}{u}",
    st.one_of(st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True)),
    st.sampled_from(UNITS),
)
texts = st.one_of(st.text(max_size=30), st.sampled_from(NASTY_TEXT))
scalars = st.one_of(numbers, unit_strings, texts, st.booleans(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document a mutation can touch: mapping keys and list positions."""
    out: list[tuple[Any, ...]] = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw: st.DrawFn, bases: list[Any], vocabulary: list[str]) -> str:
    """YAML text of one of ``bases`` with one to five edits; new keys come from ``vocabulary``."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 5))):
        path = draw(st.sampled_from(_paths(doc)))
        target = _at(doc, path)
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "add" and isinstance(target, dict):
            key = draw(st.one_of(st.sampled_from(vocabulary), st.text(max_size=10)))
            target[key] = draw(values)
        elif action == "add" and isinstance(target, list):
            target.append(draw(values))
        elif path and action == "delete":
            parent = _at(doc, path[:-1])
            del parent[path[-1]]
        elif path:
            _at(doc, path[:-1])[path[-1]] = draw(values)
        else:
            doc = draw(values)
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def document_inputs(bases: list[Any], vocabulary: list[str]) -> st.SearchStrategy[bytes]:
    """Bytes for a file: mutated valid documents, random YAML-ish text, or random bytes."""
    return st.one_of(
        mutated(bases, vocabulary).map(lambda t: t.encode("utf-8", "surrogatepass")),
        mutated(bases, vocabulary).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.text().map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.binary(max_size=200),
        values.map(lambda v: yaml.safe_dump(v).encode("utf-8", "surrogatepass")),
    )


def keys_of(doc: Any) -> list[str]:
    """All mapping keys in a document (the vocabulary for added keys)."""
    out: set[str] = set()
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.update(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return sorted(out)


def one_line_or_loaded(load: Callable[[], Any], refused: type[BaseException]) -> str:
    """Run ``load``; "accepted", or "refused" when it raised ``refused`` with a one-line message.
    Any other exception propagates, which fails the property with its traceback."""
    try:
        load()
    except refused as err:
        message = str(err)
        assert message and "\n" not in message, f"not one line: {message!r}"
        assert "Traceback" not in message
        return "refused"
    return "accepted"
