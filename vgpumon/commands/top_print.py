"""``top`` with no terminal to draw on (its output piped or redirected): one reading, printed.

``vgpumon top | less`` or ``vgpumon top > now.txt`` gets what ``top`` would have shown first, as
text, and ``top`` exits (nvitop does the same): one host prints as ``vgpumon snapshot`` prints it;
several hosts print the fleet table, a row per host. The reading is the feed's own, so every mode
(this host, ``--sim``, ``--url``, ``--targets``, ``--ssh.targets``) prints the same way it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

from vgpumon.feed import Fleet, HostState, HostUpdate, SnapshotFeed
from vgpumon.text import printable

# How long to wait for the hosts' first answers: a host still connecting by then is printed so.
# Each exporter's own timeout (at most 5 s) makes it unreachable well before.
WAIT_SECONDS = 15.0
STOP_SECONDS = 2.0


async def first_reading(
    feed: SnapshotFeed[Fleet], *, readings: int = 1, seconds: float = WAIT_SECONDS
) -> Fleet | None:
    """The feed's news once every host has answered (``readings`` snapshots from a host that
    answered; a failure counts at once), or what it has after ``seconds``."""
    seen: dict[str, list[object]] = {}
    done = asyncio.Event()

    def settled(update: HostUpdate) -> bool:
        if update.state is HostState.CONNECTING:
            return False
        if update.state is not HostState.UP:
            return True
        return len(seen.get(update.host, ())) >= readings

    def took(news: Fleet) -> None:
        for update in news.hosts:
            kept = seen.setdefault(update.host, [])
            if update.snapshot is not None and not any(s is update.snapshot for s in kept):
                kept.append(update.snapshot)
        if news.hosts and all(settled(u) for u in news.hosts):
            done.set()

    feed.on_snapshot(took)
    stop = asyncio.Event()
    running = asyncio.create_task(feed.run(stop))
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(done.wait(), seconds)
    news = feed.latest
    stop.set()
    with contextlib.suppress(asyncio.TimeoutError, Exception):
        await asyncio.wait_for(running, STOP_SECONDS)
    return news


def print_reading(news: Fleet | None) -> int:
    """Print the reading: one host as ``snapshot`` does, several as the fleet table. A lone host
    that did not answer is one line on stderr and status 1."""
    from vgpumon.view import rows as vr
    from vgpumon.view.render import render, render_hosts

    hosts = () if news is None else news.hosts
    if len(hosts) == 1:
        update = hosts[0]
        if update.snapshot is None or update.state is not HostState.UP:
            reason = update.error or update.state.value
            # The reason may quote the peer: control characters go out escaped.
            sys.stderr.write(printable(f"vgpumon: error: {update.host}: {reason}") + "\n")
            return 1
        render(update.snapshot)
        return 0
    rows = [
        vr.host_row(u.host, u.state.value, u.snapshot, error=u.error, stale=u.stale) for u in hosts
    ]
    render_hosts(rows, title=news.name if news is not None else "hosts")
    return 0
