"""The lifeline's decisions, without exiting the test process: what ends ``top`` at once, what
gets a clean quit first, and the deadline behind it (tests/tui/test_terminal_life.py runs the
real thing in tmux)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import threading
import time

from vgpumon.tui.lifeline import BACKSTOP_SECONDS, GRACE_SECONDS, GuardedOutput, Lifeline


class Recorder:
    def __init__(self) -> None:
        self.exits: list[int] = []
        self.alarms: list[float] = []
        self.quits = 0
        self.exited = threading.Event()

    def exit_now(self, code: int) -> None:
        self.exits.append(code)
        self.exited.set()

    def lifeline(self) -> Lifeline:
        return Lifeline(exit_now=self.exit_now, alarm=self.alarms.append)


def attached(rec: Recorder, lifeline: Lifeline, *, quits: bool) -> asyncio.AbstractEventLoop:
    """A loop on a thread, as the app's; its quit ends the process (or never does)."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def quit() -> None:
        rec.quits += 1
        if quits:
            rec.exit_now(0)

    lifeline.attach(loop, quit)
    return loop


def test_a_lost_terminal_ends_at_once() -> None:
    rec = Recorder()
    lifeline = rec.lifeline()
    attached(rec, lifeline, quits=False)
    lifeline.terminal_lost("the terminal hung up")
    assert rec.exits == [128 + signal.SIGHUP] and rec.alarms == [] and rec.quits == 0


def test_sigterm_quits_cleanly_then_the_deadline_gives_the_terminal_back() -> None:
    rec = Recorder()
    lifeline = rec.lifeline()
    restored = []
    lifeline.restore = lambda: restored.append(True)
    attached(rec, lifeline, quits=False)  # a quit that hangs
    started = time.monotonic()
    lifeline.signalled(signal.SIGTERM)
    assert rec.alarms == [BACKSTOP_SECONDS]
    assert rec.exited.wait(5)
    assert time.monotonic() - started >= GRACE_SECONDS * 0.9
    assert rec.quits == 1 and rec.exits == [128 + signal.SIGTERM] and restored == [True]


def test_a_second_sigterm_ends_at_once() -> None:
    rec = Recorder()
    lifeline = rec.lifeline()
    attached(rec, lifeline, quits=False)
    lifeline.signalled(signal.SIGTERM)
    lifeline.signalled(signal.SIGTERM)
    assert rec.exits == [128 + signal.SIGTERM]


def test_a_signal_before_the_app_runs_ends_at_once() -> None:
    rec = Recorder()
    rec.lifeline().signalled(signal.SIGTERM)
    assert rec.exits == [128 + signal.SIGTERM]


def test_a_hang_up_of_the_terminal_is_seen_without_a_signal() -> None:
    """EOF on the terminal with no SIGHUP (a process that missed it): the watch thread sees it."""
    rec = Recorder()
    lifeline = rec.lifeline()
    attached(rec, lifeline, quits=False)
    master, slave = os.openpty()
    wake, _other = socket.socketpair()
    lifeline.watch(wake, [slave])
    assert not rec.exited.wait(0.2)
    os.close(master)
    assert rec.exited.wait(5)
    assert rec.exits == [128 + signal.SIGHUP] and lifeline.terminal_gone
    os.close(slave)
    wake.close()
    _other.close()


def test_a_signal_number_on_the_wakeup_socket_is_acted_on() -> None:
    rec = Recorder()
    lifeline = rec.lifeline()
    attached(rec, lifeline, quits=True)
    wake, writer = socket.socketpair()
    lifeline.watch(wake, [])
    writer.send(bytes([signal.SIGWINCH, signal.SIGTERM]))  # a resize is not a stop
    assert rec.exited.wait(5)
    assert rec.quits == 1 and rec.exits == [0]
    wake.close()
    writer.close()


class Broken(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(5, "Input/output error")


def test_a_failed_write_tells_once_and_later_writes_are_dropped() -> None:
    lost: list[str] = []
    out = GuardedOutput(Broken(), lost.append)
    assert out.write("screen") == 6
    out.write("more")
    out.flush()
    assert len(lost) == 1 and "Input/output error" in lost[0]


def test_the_watch_thread_ends_when_its_wakeup_socket_can_bring_nothing_more() -> None:
    """Before, a wakeup socket whose other end closed left the thread polling a socket that is
    always readable (EOF): a core spun until the process ended."""
    lifeline = Recorder().lifeline()
    wake, writer = socket.socketpair()
    master, slave = os.openpty()
    thread = lifeline.watch(wake, [slave])
    writer.close()
    thread.join(2.0)
    assert not thread.is_alive()
    for s in (wake, writer):
        s.close()
    os.close(master)
    os.close(slave)
