"""``top`` ends within a second when its terminal goes away or it is told to stop.

A terminal goes in three ways, and ``top`` hears each of them:

* SIGHUP: the terminal emulator, the tmux pane or the SSH session closed;
* a hang-up on the terminal's file descriptors (poll reports POLLHUP: reads give EOF, writes
  fail), which a process that missed SIGHUP (started under ``nohup``, not the terminal's
  foreground) still sees: a thread waits for it;
* a write to the terminal that fails (:class:`GuardedOutput`, around what the driver writes).

SIGTERM asks it to stop while the terminal is still there.

When the terminal has gone there is no screen to give back and nothing a clean quit would do
matters (NVML, sockets and threads are the kernel's to free at exit): the process exits at once.
On SIGTERM the app is asked to quit the way ``q`` quits (the terminal gets its screen, cursor and
modes back), and a deadline is armed: a process that has not ended by then (a write blocked on a
terminal that reads nothing, the feed's thread, NVML's shutdown, an interpreter joining threads at
exit) gives the terminal its modes back and exits anyway. The deadline runs on a thread of its own
and, behind it, on the kernel's interval timer (SIGALRM, whose default action ends the process),
so neither a busy event loop nor a thread that holds the interpreter keeps ``top`` alive. A second
SIGTERM ends it at once.

Before the app's event loop runs (start-up: imports, NVML, the first connections) there is no
screen to give back: a signal ends the process at once, as the default action of SIGHUP and SIGTERM
would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import socket
import termios
import threading
from collections.abc import Callable
from typing import IO, Any

GRACE_SECONDS = 0.6  # a clean quit has this long; then the process exits regardless
BACKSTOP_SECONDS = 0.9  # the kernel's alarm: ends the process even when no thread can run
HANGUP_EVENTS = select.POLLHUP | select.POLLERR | select.POLLNVAL
STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
# What a full-screen program leaves behind and a terminal needs undone: the alternate screen,
# the hidden cursor, mouse reporting, bracketed paste, focus events, the kitty keyboard protocol,
# line wrapping (what Textual's driver turns on, turned off in reverse order).
RESET = (
    b"\x1b[<u\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1016l"
    b"\x1b[?2004l\x1b[?1004l\x1b[?7h\x1b[?1049l\x1b[?25h"
)


def terminal_fds(fds: tuple[int, ...] = (0, 1, 2)) -> list[int]:
    """Those of ``fds`` that are a terminal (a pipe or file has no hang-up to wait for)."""
    out = []
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.isatty(fd):
                out.append(fd)
    return out


class Lifeline:
    """Ends the process within :data:`BACKSTOP_SECONDS` of its terminal going away or a stop
    signal, after asking the app to quit (:meth:`attach`).

    Signals are acted on by a thread of the lifeline's own, not by the main thread: the signal
    handler only wakes it (``signal.set_wakeup_fd``, written by the interpreter's C handler in
    whichever thread the kernel picked), so an event loop asleep in ``epoll`` or a main thread
    busy drawing a screen does not delay the deadline. The same thread waits for the terminal's
    hang-up."""

    def __init__(
        self,
        exit_now: Callable[[int], object] = os._exit,
        alarm: Callable[[float], object] = lambda s: signal.setitimer(signal.ITIMER_REAL, s),
    ) -> None:
        self._exit_now = exit_now  # a test records instead of exiting
        self._alarm = alarm  # and arms no alarm
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._quit: Callable[[], object] | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._terminal: list[int] = []  # the descriptors that are the terminal
        self.restore: Callable[[], object] | None = None  # the terminal's modes back, at once
        self.ending = False
        self.terminal_gone = False
        self.code = 0  # the exit status: 128 + the signal's number (SIGHUP's when it went)
        self.reason = ""

    # ------------------------------------------------------------------ set up

    def install(self, fds: tuple[int, ...] = (0, 1, 2)) -> None:
        """Take SIGHUP and SIGTERM and watch the terminal for a hang-up (main thread only)."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._wake = (reader, writer)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, _woken)
        self.watch(reader, terminal_fds(fds))

    def watch(self, wake: socket.socket, fds: list[int]) -> threading.Thread:
        """Start the thread that acts on what ``wake`` receives (signal numbers) and on a
        hang-up of ``fds`` (the terminal). It ends when ``wake`` can bring nothing more (its
        other end closed, or it was closed)."""
        self._terminal = list(fds)
        thread = threading.Thread(
            target=self._watch, args=(wake, list(fds)), name="vgpumon-lifeline", daemon=True
        )
        thread.start()
        return thread

    def attach(self, loop: asyncio.AbstractEventLoop, quit: Callable[[], object]) -> None:
        """The app's loop runs: from now on ``quit`` (called on that loop) is how to end."""
        with self._lock:
            self._loop, self._quit = loop, quit
            ending = self.ending
        if ending:  # the signal came while the app was starting
            self._ask_quit()

    # ------------------------------------------------------------------ what ends it

    def signalled(self, signum: int) -> None:
        """SIGHUP or SIGTERM arrived (the watch thread, or a test). A terminal that closed has
        hung up before the kernel sends SIGHUP; a SIGHUP sent with the terminal still there
        (``kill -HUP``) quits as SIGTERM does, giving the screen back."""
        name = signal.Signals(signum).name
        self.end(128 + signum, gone=self.hung_up(), reason=name, told=True)

    def hung_up(self) -> bool:
        """Whether one of the terminal's descriptors reports a hang-up now."""
        if not self._terminal:
            return False
        poller = select.poll()
        for fd in self._terminal:
            poller.register(fd, 0)
        try:
            return any(mask & HANGUP_EVENTS for _, mask in poller.poll(0))
        except OSError:
            return False

    def terminal_lost(self, reason: str) -> None:
        """The terminal went away (a hang-up or a failed write): end, from any thread."""
        self.end(128 + signal.SIGHUP, gone=True, reason=reason)

    def end(self, code: int, *, gone: bool, reason: str, told: bool = False) -> None:
        """Quit cleanly if the app can within :data:`GRACE_SECONDS`; exit regardless after.
        ``told``: a signal, which a second time means now."""
        with self._lock:
            again = self.ending
            self.ending = True
            self.terminal_gone = self.terminal_gone or gone
            if not again:
                self.code, self.reason = code, reason
            attached = self._loop is not None
        if again:
            if told:
                self._deadline()  # told twice: no more waiting
            return
        if gone or not attached:
            # No terminal to give back a screen to (or nothing on it yet): nothing a clean quit
            # would do matters (NVML and sockets are the kernel's to free at exit), so end now.
            self._deadline()
            return
        # The kernel's alarm first: it needs no thread of ours to run.
        with contextlib.suppress(OSError, ValueError):
            self._alarm(BACKSTOP_SECONDS)
        timer = threading.Timer(GRACE_SECONDS, self._deadline)
        timer.daemon = True
        timer.name = "vgpumon-deadline"
        timer.start()
        self._ask_quit()

    def _ask_quit(self) -> None:
        loop, quit = self._loop, self._quit
        if loop is None or quit is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: the app is gone already
            loop.call_soon_threadsafe(quit)

    def _deadline(self) -> None:
        """Give a terminal that is still there its modes back, then exit."""
        if not self.terminal_gone and self.restore is not None:
            with contextlib.suppress(Exception):
                self.restore()
        self._exit_now(self.code)

    # ------------------------------------------------------------------ the watch thread

    def _watch(self, wake: socket.socket, fds: list[int]) -> None:
        # Every wake-up must consume what woke it: a descriptor that stays ready (a closed
        # socket's EOF, a closed descriptor's POLLNVAL) would make poll return at once forever
        # and this thread spin on a core. So the thread ends when the wakeup socket can bring
        # nothing more, and a terminal descriptor leaves the poll set once it has hung up.
        wake_fd = wake.fileno()
        poller = select.poll()
        poller.register(wake_fd, select.POLLIN)
        for fd in fds:
            poller.register(fd, 0)  # no events asked: hang-ups and errors are always reported
        terminal = set(fds)
        while True:
            try:
                events = poller.poll()
            except InterruptedError:
                continue
            for fd, mask in events:
                if fd in terminal and mask & HANGUP_EVENTS:
                    self.terminal_lost("the terminal hung up")
                    poller.unregister(fd)
                    terminal.discard(fd)
                elif fd == wake_fd:
                    if mask & select.POLLNVAL:
                        return  # the socket was closed here
                    try:
                        received = wake.recv(64)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        return
                    if not received:
                        return  # the other end closed: no signal can come this way again
                    for signum in received:
                        if signum in STOP_SIGNALS:
                            self.signalled(signum)


def _woken(signum: int, frame: Any) -> None:
    """The Python-level handler of SIGHUP and SIGTERM does nothing: the interpreter's C handler
    has written the signal's number to the wakeup socket, and the lifeline's thread acts on it
    (a handler here would wait for the main thread)."""


class GuardedOutput:
    """The driver's output (a text file on the terminal) whose first failed write tells the
    lifeline the terminal is gone; later writes are dropped, so the driver's writer thread never
    dies and nothing waits on a queue that nobody empties."""

    def __init__(self, file: IO[str], lost: Callable[[str], object]) -> None:
        self._file = file
        self._lost = lost
        self.failed = False

    def write(self, text: str) -> int:
        if self.failed:
            return len(text)
        try:
            return self._file.write(text)
        except (OSError, ValueError) as exc:
            self._fail(exc)
            return len(text)

    def flush(self) -> None:
        if self.failed:
            return
        try:
            self._file.flush()
        except (OSError, ValueError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.failed = True
        self._lost(f"writing to the terminal failed: {exc}")

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def restore_terminal(fd: int, attrs: list[Any] | None) -> None:
    """The terminal's modes as they were before ``top``: written straight to the terminal,
    without waiting (a terminal that does not read its input must not keep ``top`` alive)."""
    if attrs is not None:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSANOW, attrs)
    try:
        tty = os.open(os.ttyname(fd), os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.write(tty, RESET)
    finally:
        os.close(tty)
