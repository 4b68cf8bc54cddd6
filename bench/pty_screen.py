"""A program in a real pseudo-terminal, and the screen it draws, read back as a terminal would.

For benchmarks that run a full-screen program (``vgpumon top``) the way a person does, on hosts
without tmux: :class:`PtyProgram` starts the command on a pty of a given size, reads everything
it writes on a thread of its own, and keeps :class:`Screen` (a minimal VT100/xterm emulator: the
cursor addressing, erasing and SGR colours a Textual application writes) current, with the time
at which each change arrived. A test of the screen (:meth:`PtyProgram.wait_for`) is evaluated as
each chunk of output is applied, so "the key's effect was on screen" is timed to the chunk that
put it there, not to a polling interval.

Only what the benchmark reads is emulated: characters, their background colour (the table's
cursor row has a background of its own) and the cursor position. Scroll regions, insert and
delete modes, and charsets beyond UTF-8 are not.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import pty
import select
import signal
import struct
import termios
import threading
import time
import unicodedata
from collections.abc import Callable, Sequence

Check = Callable[["Screen"], bool]


def _width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


class Screen:
    """Characters and background colours of a ``columns`` x ``rows`` terminal."""

    def __init__(self, columns: int, rows: int) -> None:
        self.columns, self.rows = columns, rows
        self.chars = [[" "] * columns for _ in range(rows)]
        self.backgrounds: list[list[str]] = [[""] * columns for _ in range(rows)]
        self.x = self.y = 0
        self.background = ""  # the current SGR background ("" is the default)
        self.alternate = False  # the alternate screen is on (a full-screen program runs)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = ""  # an escape sequence cut by the end of a chunk

    # ------------------------------------------------------------------ reading

    def line(self, y: int) -> str:
        return "".join(self.chars[y]).rstrip()

    @property
    def text(self) -> str:
        return "\n".join(self.line(y) for y in range(self.rows))

    def cursor_row(self, first: int = 0, last: int | None = None) -> tuple[int, str] | None:
        """The row (index, text) of a table's cursor between rows ``first`` and ``last``: the
        one row whose background in its second column no other row there has."""
        last = self.rows - 1 if last is None else last
        seen: dict[str, list[int]] = {}
        for y in range(first, last + 1):
            seen.setdefault(self.backgrounds[y][1], []).append(y)
        lone = [ys[0] for ys in seen.values() if len(ys) == 1]
        if len(lone) != 1 or len(seen) < 2:
            return None
        return lone[0], self.line(lone[0])

    # ------------------------------------------------------------------ writing

    def feed(self, data: bytes) -> None:
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "\x1b":
                end = self._escape(text, i)
                if end is None:
                    self._pending = text[i:]
                    return
                i = end
                continue
            if c == "\r":
                self.x = 0
            elif c == "\n":
                self.y = min(self.rows - 1, self.y + 1)
            elif c == "\b":
                self.x = max(0, self.x - 1)
            elif c >= " ":
                self._put(c)
            i += 1

    def _put(self, char: str) -> None:
        width = _width(char)
        if width == 0:
            return
        if self.x + width > self.columns:
            self.x = 0
            self.y = min(self.rows - 1, self.y + 1)
        row, back = self.chars[self.y], self.backgrounds[self.y]
        row[self.x], back[self.x] = char, self.background
        if width == 2 and self.x + 1 < self.columns:
            row[self.x + 1], back[self.x + 1] = "", self.background
        self.x += width

    def _escape(self, text: str, i: int) -> int | None:
        """Apply the escape sequence at ``text[i]``; the index after it, None when incomplete."""
        if i + 1 >= len(text):
            return None
        kind = text[i + 1]
        if kind == "[":
            j = i + 2
            while j < len(text) and not ("@" <= text[j] <= "~"):
                j += 1
            if j >= len(text):
                return None
            self._csi(text[i + 2 : j], text[j])
            return j + 1
        if kind == "]" or kind == "P" or kind == "_":  # OSC, DCS, APC: up to BEL or ST
            j = i + 2
            while j < len(text):
                if text[j] == "\x07":
                    return j + 1
                if text[j] == "\x1b" and j + 1 < len(text) and text[j + 1] == "\\":
                    return j + 2
                j += 1
            return None
        if kind in "()*+":  # a charset: one more character
            return i + 3 if i + 2 < len(text) else None
        return i + 2  # ESC 7, ESC 8, ESC =, ESC >, ...

    def _csi(self, params: str, final: str) -> None:
        private = params.startswith(("?", ">", "<", "="))
        body = params.lstrip("?><=").rstrip("$ ")
        values = [int(p) if p.isdigit() else 0 for p in body.split(";")] if body else []

        def arg(k: int, default: int = 1) -> int:
            return values[k] if len(values) > k and values[k] else default

        if private:
            if final in "hl" and 1049 in values:
                self.alternate = final == "h"
                if self.alternate:
                    self._clear()
            return
        if final in "Hf":
            self.y = min(self.rows - 1, arg(0) - 1)
            self.x = min(self.columns - 1, arg(1) - 1)
        elif final == "m":
            self._sgr(body)
        elif final == "J":
            if arg(0, 0) == 2 or arg(0, 0) == 3:
                self._clear()
            elif arg(0, 0) == 0:
                self._erase(self.y, self.x, self.columns)
                for y in range(self.y + 1, self.rows):
                    self._erase(y, 0, self.columns)
        elif final == "K":
            mode = arg(0, 0)
            start, end = (self.x, self.columns) if mode == 0 else (0, self.x + 1)
            if mode == 2:
                start, end = 0, self.columns
            self._erase(self.y, start, end)
        elif final == "X":
            self._erase(self.y, self.x, min(self.columns, self.x + arg(0)))
        elif final == "A":
            self.y = max(0, self.y - arg(0))
        elif final == "B":
            self.y = min(self.rows - 1, self.y + arg(0))
        elif final == "C":
            self.x = min(self.columns - 1, self.x + arg(0))
        elif final == "D":
            self.x = max(0, self.x - arg(0))
        elif final == "G":
            self.x = min(self.columns - 1, arg(0) - 1)
        elif final == "d":
            self.y = min(self.rows - 1, arg(0) - 1)

    def _sgr(self, body: str) -> None:
        parts = body.split(";") if body else ["0"]
        k = 0
        while k < len(parts):
            p = parts[k]
            if p in ("", "0"):
                self.background = ""
            elif p == "48" and k + 1 < len(parts):
                take = 5 if parts[k + 1] == "2" else 3
                self.background = ";".join(parts[k : k + take])
                k += take - 1
            elif p == "38" and k + 1 < len(parts):
                k += 4 if parts[k + 1] == "2" else 2
            elif p == "49":
                self.background = ""
            elif (len(p) == 2 and p[0] == "4") or (len(p) == 3 and p[:2] == "10"):
                self.background = p
            k += 1

    def _erase(self, y: int, start: int, end: int) -> None:
        for x in range(start, end):
            self.chars[y][x] = " "
            self.backgrounds[y][x] = self.background

    def _clear(self) -> None:
        for y in range(self.rows):
            self._erase(y, 0, self.columns)


class PtyProgram:
    """``argv`` on a pty of ``size`` (columns, rows), its screen kept current on a thread."""

    def __init__(
        self, argv: Sequence[str], size: tuple[int, int], env: dict[str, str] | None = None
    ) -> None:
        self.screen = Screen(*size)
        self.changed = threading.Condition()
        self.version = 0  # chunks applied
        self.changed_at = 0.0  # time.monotonic() when the last chunk was applied
        self.restored_at: float | None = None  # when the program left the alternate screen
        self.bytes_read = 0
        self.started = time.monotonic()
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its terminal
            try:
                os.execve(argv[0], list(argv), env or dict(os.environ))
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        columns, rows = size
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.exit_status: int | None = None
        self.exited_at: float | None = None
        self._reaping = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="pty-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.fd], [], [], 0.5)
            except (OSError, ValueError):
                return
            if not ready:
                if self._reap():
                    return
                continue
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                data = b""
            now = time.monotonic()
            if not data:
                self._reap(block=True)
                with self.changed:
                    self.changed.notify_all()
                return
            with self.changed:
                alternate = self.screen.alternate
                self.screen.feed(data)
                if alternate and not self.screen.alternate:
                    self.restored_at = now
                self.bytes_read += len(data)
                self.version += 1
                self.changed_at = now
                self.changed.notify_all()

    def _reap(self, block: bool = False) -> bool:
        with self._reaping:
            if self.exit_status is not None:
                return True
            try:
                pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid == 0:
                return False
            self.exited_at = time.monotonic()
            self.exit_status = os.waitstatus_to_exitcode(status)
            return True

    def send(self, keys: str) -> float:
        """Type ``keys``; the time they were written."""
        sent = time.monotonic()
        os.write(self.fd, keys.encode())
        return sent

    def wait_for(self, check: Check, seconds: float, after: float | None = None) -> float | None:
        """The time of the first chunk after which ``check(screen)`` held (now, if it holds
        already); None when it did not within ``seconds``. With ``after``, only chunks that came
        after that time count (the effect of a key sent then, not what was there before)."""
        give_up = time.monotonic() + seconds
        with self.changed:
            while True:
                fresh = after is None or self.changed_at >= after
                if fresh and check(self.screen):
                    return self.changed_at
                left = give_up - time.monotonic()
                if left <= 0 or self.exit_status is not None:
                    return None
                self.changed.wait(left)

    def wait_exit(self, seconds: float) -> float | None:
        """The time the program exited; None when it is still running after ``seconds``."""
        give_up = time.monotonic() + seconds
        while time.monotonic() < give_up:
            if self._reap():
                return self.exited_at
            time.sleep(0.005)
        return None

    def kill(self) -> None:
        if self.exit_status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait_exit(5)
        with contextlib.suppress(OSError):
            os.close(self.fd)
