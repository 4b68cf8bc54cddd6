"""A command in a pseudo-terminal: every byte it writes to the terminal, and keys sent to it.

tmux and the pilot tests see a screen after a terminal (or Textual) has interpreted it; a test of
what reaches the terminal itself needs the raw bytes, which a pty gives.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence

# A control sequence introducer and its parameters: the sequences a screen is drawn with (SGR
# colours, cursor moves, modes). Everything else that starts with ESC is not drawing.
CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# Bidirectional overrides and isolates (they reorder what a reader sees).
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class Terminal:
    """``argv`` running on a pty of ``size`` (columns, rows), its output collected as it comes."""

    def __init__(
        self,
        argv: Sequence[str],
        size: tuple[int, int] = (200, 50),
        env: dict[str, str] | None = None,
    ) -> None:
        self.master, slave = os.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        environ = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
        environ.pop("NO_COLOR", None)
        environ.update(env or {})
        self.proc = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environ,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        self.output = bytearray()

    def read_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self.master], [], [], min(left, 0.1))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the other end closed (the command ended)
                    return
                if not chunk:
                    return
                self.output += chunk

    def wait_for(self, needle: bytes, seconds: float = 60.0) -> bool:
        """Read until ``needle`` is in the output (True) or ``seconds`` have passed (False)."""
        end = time.monotonic() + seconds
        while needle not in self.output:
            if time.monotonic() > end or self.proc.poll() is not None:
                self.read_for(0.2)
                return needle in self.output
            self.read_for(0.2)
        return True

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self, seconds: float = 15.0) -> int | None:
        """Wait for the command to end (reading what it still writes); killed if it does not."""
        end = time.monotonic() + seconds
        while self.proc.poll() is None and time.monotonic() < end:
            self.read_for(0.1)
        code = self.proc.poll()
        if code is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.read_for(0.2)
        os.close(self.master)
        return code

    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")


def stray_controls(text: str) -> list[str]:
    """What in ``text`` is not text or screen drawing: ESC sequences other than CSI, C0 controls
    other than newline, carriage return, backspace and bell-free whitespace, C1 controls and
    bidirectional overrides; each as its ``repr`` with a little context."""
    rest = CSI.sub("", text)
    found = []
    for i, c in enumerate(rest):
        code = ord(c)
        bad = (
            (code < 0x20 and c not in "\n\r\t\b")
            or code == 0x7F
            or 0x80 <= code <= 0x9F
            or c in BIDI
        )
        if bad:
            found.append(repr(rest[max(0, i - 10) : i + 20]))
    return found
