"""The sampler process's main: ``python -m vgpumon.collect.sampler_child FD``.

It reads the recipe that builds its sampler from stdin (:data:`~vgpumon.collect.frames.START`),
builds it (NVML is opened here, never in the serving process), says so on ``FD`` (``HELLO``, or
``FAILED`` with the one-line error and the exit status the command would have had), then cycles
in its main thread and writes each snapshot to ``FD``. Further frames on stdin change the
configured fields or ask for a cycle now; the end of stdin (the serving process stopped, or died)
ends it: the cycle in flight completes, the sampler closes within its bound, the process exits.

Terminal signals are the serving process's business: it runs in a session of its own and ignores
SIGINT and SIGHUP; a SIGTERM sent to it alone ends it at once, as any process.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from vgpumon.collect import frames
from vgpumon.collect.sampler import Sampler
from vgpumon.collect.threads import daemon_thread, name_current_thread
from vgpumon.errors import VgpumonError, one_line

log = logging.getLogger(__name__)


def _listen(sampler: Sampler, control: Any) -> None:
    """The control thread: the serving process's requests, until its end of stdin."""
    try:
        while (message := frames.read_frame(control)) is not None:
            kind, value = message
            if kind == frames.FIELDS:
                sampler.set_extra_fields(tuple(value))
            elif kind == frames.REFRESH:
                sampler.refresh()
    except (OSError, ValueError, EOFError) as exc:  # a broken pipe ends it like its end
        log.debug("sampler control channel: %s", exc)
    finally:
        sampler.halt()


def run(out: int, control: Any) -> int:
    started = frames.read_frame(control)
    if started is None or started[0] != frames.START:
        return 2
    recipe = started[1]
    try:
        sampler = recipe()
    except VgpumonError as err:
        frames.write_frame(out, frames.FAILED, (str(err), err.exit_code))
        return err.exit_code
    if not isinstance(sampler, Sampler):
        frames.write_frame(out, frames.FAILED, ("the sampler recipe made no sampler", 1))
        return 1
    frames.write_frame(out, frames.HELLO, sampler.name)
    daemon_thread(_listen, "vgpumon-control", (sampler, control)).start()

    def publish(snapshot: Any) -> None:
        pieces = frames.encode_snapshot(snapshot, sampler.not_ready_reason)
        frames.write_frame(out, frames.SNAPSHOT, pieces)

    try:
        sampler.drive(publish)
    except OSError as exc:  # the serving process is gone: nobody to publish to
        log.debug("sampler process output closed: %s", one_line(exc))
    finally:
        sampler.close()
    return 0


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    name_current_thread("vgpumon-cycle")  # this thread drives the cycles
    code = run(int(argv[1]), sys.stdin.buffer)
    logging.shutdown()
    # Worker threads stuck in NVML are daemons: they must not hold the exit.
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv)
