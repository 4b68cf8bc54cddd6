"""The one hardened way to read the YAML files users hand to vgpumon.

Scenario files (``--sim FILE``), the serve config (``serve --config``) and the web-config
(``--web.config.file``) all come through here, so every file gets the same limits and the same
kind of error (docs/design.md, rule 8): a :class:`~vgpumon.errors.ConfigError` of one line that
names the file and, where there is one, the line. Nothing a file contains may crash, hang or
exhaust the process:

* **Only regular files** are read. ``os.stat`` refuses FIFOs, devices, sockets and directories by
  name before opening (a FIFO would block the open or the read forever, ``/dev/zero`` would fill
  memory); the file is then opened with ``O_NONBLOCK`` and checked again with ``fstat``, so a file
  swapped for a FIFO between the two calls is refused too. A path with a NUL byte is refused with
  a clear line instead of Python's ``ValueError``.
* **Size cap**: at most ``max_bytes + 1`` bytes are ever read; a 30 MB file of comments is refused
  after reading its first megabytes, not parsed.
* **UTF-8** is required, and a stray byte is reported with its line and column.
* **Depth cap** while composing: the composer is recursive, so nesting deeper than
  :data:`MAX_DEPTH` is refused as it is met, long before Python's recursion limit.
* **Alias budget**: anchors and aliases are allowed (scenario files use merge keys), but a tree
  whose expansion exceeds :data:`MAX_NODES` (a "billion laughs") or refers to itself is refused.
* **Duplicate keys** in a mapping are refused with the line of the second one (PyYAML would keep
  the last silently, which makes a typo invisible).

Callers build their values from the node tree (which keeps every key's line) with the strict-key
helpers below. Reading is blocking file I/O: async callers use ``asyncio.to_thread(read_text, ...)``
so a slow disk never stalls the event loop.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Iterable
from typing import Any

import yaml

from vgpumon.errors import ConfigError, one_line

MAX_DEPTH = 64
MAX_NODES = 200_000
CONFIG_MAX_BYTES = 1 << 20  # serve config, web-config, certificate and key files
SCENARIO_MAX_BYTES = 8 << 20  # a recorded 8-GPU vGPU host with its processes is well below this

TAG = "tag:yaml.org,2002:"
MERGE_TAG = TAG + "merge"

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def check_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a string; a NUL byte (which no file name can hold) is a clear error."""
    text = os.fspath(path)
    if "\0" in text:
        raise ConfigError(f"{what} {text!r}: the file name contains a NUL byte")
    if not text:
        raise ConfigError(f"{what}: the file name is empty")
    return text


def read_bytes(path: str | os.PathLike[str], what: str, max_bytes: int = CONFIG_MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is a ConfigError."""
    name = check_path(path, what)
    try:
        before = os.stat(name)
    except OSError as err:
        raise ConfigError(f"cannot read {what} {name}: {err.strerror or err}") from None
    if not stat.S_ISREG(before.st_mode):
        raise ConfigError(f"{what} {name}: {_kind(before.st_mode)}, not a regular file")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(name, flags)
    except OSError as err:
        raise ConfigError(f"cannot read {what} {name}: {err.strerror or err}") from None
    try:
        after = os.fstat(fd)
        if not stat.S_ISREG(after.st_mode):  # replaced between stat and open
            raise ConfigError(f"{what} {name}: {_kind(after.st_mode)}, not a regular file")
        if after.st_size > max_bytes:
            raise ConfigError(f"{what} {name}: {after.st_size} bytes, more than {max_bytes}")
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as err:
        raise ConfigError(f"cannot read {what} {name}: {err.strerror or err}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # grew after fstat
        raise ConfigError(f"{what} {name}: more than {max_bytes} bytes")
    return data


def decode(data: bytes, label: str) -> str:
    """UTF-8 text; a bad byte is reported with its line and column (1-based)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            f"{label} line {line} column {column}: not UTF-8 text "
            f"(byte 0x{data[err.start]:02x}; save the file as UTF-8)"
        ) from None


def read_text(path: str | os.PathLike[str], what: str, max_bytes: int = CONFIG_MAX_BYTES) -> str:
    """:func:`read_bytes` then :func:`decode`; ``what`` names the kind of file in messages."""
    name = check_path(path, what)
    return decode(read_bytes(name, what, max_bytes), f"{what} {name}")


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer counts depth and refuses duplicate keys as it builds nodes."""

    def __init__(self, text: str, label: str) -> None:
        super().__init__(text)
        self.label = label
        self.path: list[str] = []  # keys and [indexes] from the root to the node being composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # PyYAML passes a mapping value's key node, or a sequence item's position, as ``index``.
        if isinstance(index, yaml.ScalarNode):
            self.path.append(str(index.value))
        elif isinstance(index, int) and not isinstance(index, bool):
            self.path.append(f"[{index}]")
        else:
            self.path.append("")
        try:
            if len(self.path) > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(
                    f"{self.label} line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep"
                )
            return super().compose_node(parent, index)
        finally:
            self.path.pop()

    def where(self) -> str:
        text = "".join(p if p.startswith("[") else f".{p}" for p in self.path if p).lstrip(".")
        return text or "the top level"

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        node: yaml.MappingNode = super().compose_mapping_node(anchor)
        seen: set[str] = set()
        for key, _value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE_TAG:
                continue
            if key.value in seen:
                where = self.where()
                path = key.value if where == "the top level" else f"{where}.{key.value}"
                raise ConfigError(
                    f"{self.label} line {key.start_mark.line + 1}: {path}: "
                    f'duplicate key "{key.value}" in {where}'
                )
            seen.add(key.value)
        return node


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_size(root: yaml.Node, label: str) -> None:
    """Refuse alias cycles, trees whose expansion passes MAX_NODES and text no UTF-8 can hold (a
    ``"\\ud800"`` escape makes a lone surrogate, which fails later when encoded), iteratively."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[key] > MAX_NODES:
                raise ConfigError(
                    f"{label}: expands to more than {MAX_NODES} values (aliases repeat too much)"
                )
            continue
        if key in sizes:
            continue
        if isinstance(node, yaml.ScalarNode) and _SURROGATE.search(str(node.value)):
            raise ConfigError(
                f"{label} line {node.start_mark.line + 1}: not valid Unicode text "
                "(a lone surrogate such as \\ud800)"
            )
        if key in active:
            raise ConfigError(
                f"{label} line {node.start_mark.line + 1}: an alias refers to its own anchor"
            )
        active.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in active:
                raise ConfigError(
                    f"{label} line {child.start_mark.line + 1}: an alias refers to its own anchor"
                )
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node: yaml.Node) -> Iterable[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return ()


def compose(text: str, label: str) -> yaml.Node | None:
    """YAML text to a node tree (None for an empty document), within every limit above."""
    loader: _Loader | None = None
    try:
        loader = _Loader(text, label)  # the reader checks the characters here already
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = err.problem or err.context or "invalid YAML"
        raise ConfigError(f"{label}{where}: invalid YAML: {one_line(problem)}") from None
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        raise ConfigError(
            f"{label} line {line}: invalid YAML: character #x{err.character:04x} is not allowed"
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{label}: invalid YAML: {one_line(err)}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is not None:
        _check_size(node, label)
    return node


def load_node(
    path: str | os.PathLike[str], what: str, max_bytes: int = CONFIG_MAX_BYTES
) -> yaml.Node | None:
    """Read and compose one file (see :func:`read_text` and :func:`compose`)."""
    name = check_path(path, what)
    return compose(read_text(name, what, max_bytes), f"{what} {name}")


def to_python(node: yaml.Node, label: str) -> Any:
    """Plain Python values of a checked node tree (merge keys resolved)."""
    constructor = yaml.constructor.SafeConstructor()
    try:
        return constructor.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{label}{where}: {one_line(err.problem or err)}") from None
    except (yaml.YAMLError, ValueError, OverflowError) as err:
        raise ConfigError(f"{label}: {one_line(err)}") from None


# ------------------------------------------------------------------ strict keys with line numbers


def line(node: yaml.Node) -> int:
    """1-based line where ``node`` starts."""
    return int(node.start_mark.line) + 1


def is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == TAG + "null"


def unknown_key(name: str, where: str, allowed: Iterable[str]) -> str:
    """The one wording of an unknown key, for every file: what was found, where, what is allowed,
    and the closest allowed key when there is one (a typo such as ``max_request``)."""
    known = list(allowed)
    close = difflib.get_close_matches(name, known, n=1)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    return f'unknown key "{name}" in {where} (allowed: {", ".join(known)}){hint}'


def mapping(
    node: yaml.Node, label: str, where: str, allowed: Iterable[str] | None
) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """Key name -> (key node, value node) of a mapping; merge keys resolved; keys must be strings
    and, when ``allowed`` is given, known. Errors carry ``label``, the line, and ``where``."""
    if is_null(node):
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{label} line {line(node)}: {where} must be a mapping")
    own = sum(1 for key, _ in node.value if key.tag != MERGE_TAG)
    try:
        yaml.constructor.SafeConstructor().flatten_mapping(node)  # merged pairs first, then own
    except yaml.YAMLError as err:
        raise ConfigError(f"{label} line {line(node)}: {where}: {one_line(err)}") from None
    known = None if allowed is None else list(allowed)
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    first_own = len(node.value) - own
    for index, (key, value) in enumerate(node.value):
        if not isinstance(key, yaml.ScalarNode) or is_null(key):
            raise ConfigError(f"{label} line {line(key)}: {where}: keys must be strings")
        name = str(key.value)
        if known is not None and name not in known:
            raise ConfigError(f"{label} line {line(key)}: {unknown_key(name, where, known)}")
        if name in out and index < first_own:
            continue  # among merged sources the first one wins
        out[name] = (key, value)  # a mapping's own key overrides a merged one
    return out
