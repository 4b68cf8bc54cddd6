"""``vgpumon top``: the Textual application and its factory.

Live data follows one path: ``top`` is handed one feed of :class:`~vgpumon.feed.Fleet` news
(whatever its hosts are), which runs on a thread and event loop of its own
(:mod:`vgpumon.tui.runner`), so its I/O, JSON parsing and NVML scheduling never run on the UI's
loop; each host that changed is recorded into the history and the event log, and a short timer
redraws the *active* screen when something changed. Screens that are not shown do no
work; they redraw when they come back. Pausing stops redrawing, not collecting, so graphs have
no hole when the pause ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.screen import Screen

from vgpumon.feed import VIA_LIVE, Fleet, Focus, Focused, HostState, HostUpdate, SnapshotFeed
from vgpumon.model import Snapshot
from vgpumon.sources.history import History
from vgpumon.sources.procinfo import ProcInfo, ProcTable
from vgpumon.sources.usage import UsageClient
from vgpumon.text import printable
from vgpumon.tui.cells import COLOUR, Palette, palette_for
from vgpumon.tui.contrast import legible_variables
from vgpumon.tui.lifeline import Lifeline
from vgpumon.tui.runner import FeedThread
from vgpumon.tui.state import TopState
from vgpumon.tui.themes import MONOCHROME, wants_monochrome
from vgpumon.view import rows as vr
from vgpumon.view.events import Event, connection_events, snapshot_events
from vgpumon.view.filter import Query


class Backfill(Protocol):
    """Fills a host's history from elsewhere (a Prometheus server) when it first shows up."""

    async def fill(self, history: History, host: str, snapshot: Snapshot) -> int: ...

    async def close(self) -> None:
        """Let go of its connections (on the app's loop, when the app ends)."""


REDRAW_SECONDS = 0.25  # how soon a new update reaches the screen (coalesces a fleet's updates)
# How long quitting waits for the feed to stop (a cycle or poll in flight, freeing NVML): the
# terminal is given back first; after this the process exits without it.
STOP_SECONDS = 0.5
EVENTS_KEPT = 1000
# Until a theme's own are computed (vgpumon.tui.contrast.legible_variables).
TOP_VARIABLE_DEFAULTS = {
    "vgpumon-error": "red",
    "vgpumon-warning": "yellow",
    "vgpumon-good": "green",
    "vgpumon-section": "white",
    "vgpumon-gauge": "cyan",
    "vgpumon-muted": "grey",
}


class VgpumonApp(App[None]):
    """The terminal UI over one feed of :class:`~vgpumon.feed.Fleet` news (one host or many)."""

    CSS_PATH = Path(__file__).with_name("vgpumon.tcss")
    TITLE = "vgpumon top"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        # Textual keeps ctrl+c for copying; in a monitor it means quit, as in top and nvitop.
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        # The terminal is raw, so ctrl+z arrives as a key: suspend as a shell job, as top does.
        Binding("ctrl+z", "suspend_process", "suspend", show=False, priority=True),
        Binding("p", "toggle_pause", "pause"),
        Binding("slash", "filter", "filter"),
        Binding("t", "toggle_tree", "tree"),
        Binding("r", "refresh_source", "refresh", show=False),
        Binding("1", "show('overview')", "overview", show=False),
        Binding("2", "show('scheduler')", "scheduler", show=False),
        Binding("3", "show('licenses')", "licenses", show=False),
        Binding("4", "show('events')", "events", show=False),
        # Named in the footer as ``?`` (htop and nvitop's key), not as its screen number.
        Binding("question_mark,f1", "show('help')", "help", key_display="?"),
        Binding("5", "show('help')", "help", show=False),
        Binding("u", "show('usage')", "usage", show=False),
        Binding("6,c", "show('capacity')", "capacity", show=False),
        # A host read from Prometheus, read live from its exporter instead (and back).
        Binding("L", "live", "live", show=False),
    ]

    def __init__(
        self,
        feed: SnapshotFeed[Fleet],
        *,
        history: History | None = None,
        start_feed: bool = True,
        interval: float = 1.0,
        backfill: Backfill | None = None,
        clock: Callable[[], float] = time.time,
        usage: UsageClient | None = None,
        this_host: bool = False,
        lifeline: Lifeline | None = None,
    ) -> None:
        from vgpumon.tui.screens import modes

        self.feed = feed
        first = feed.latest
        self.host_names: tuple[str, ...] = () if first is None else first.names
        # Overview depends on the feed (fleet or one host), so modes are set per instance;
        # App.__init__ copies MODES into its working set.
        self.MODES = dict(modes(self))  # type: ignore[misc]
        super().__init__()
        self.history = history or History()
        self.start_feed = start_feed
        self.interval = interval
        self.hosts: dict[str, HostUpdate] = {}
        self.events: deque[tuple[int, Event]] = deque(maxlen=EVENTS_KEPT)
        self._event_seq = 0
        self.paused = False
        self.tree_mode = False
        self.filter_query = Query()
        self.dirty = True
        self.redraws = 0  # screens drawn by the timer: tests check that pausing stops them
        self.palette: Palette = COLOUR
        self.register_theme(MONOCHROME)
        # Its colours are the terminal's own sixteen, whose contrast nothing here can know (every
        # theme offered keeps text legible: tests/tui/test_contrast.py); vgpumon-mono is for
        # terminals with few colours or none.
        self.unregister_theme("textual-ansi")
        self.backfill = backfill
        self.usage = usage  # the usage screen's hourly windows (top --prometheus)
        self.clock = clock  # event times (a test passes the simulator's clock)
        self._backfilled: set[str] = set()
        self._focus: Focus | None = None  # what the feed was last told is shown
        self._rows: dict[str, vr.HostRows] = {}  # per host: the rows of its newest snapshot
        self._runner: FeedThread | None = None
        # /proc facts and signals only for processes of this host read through real NVML
        # (``this_host``): a remote or simulated host's pids name nothing (or something else) here.
        self.proc_table: ProcTable | None = ProcTable() if this_host else None
        self.send_signal: Callable[[int, int], None] = os.kill  # a test sends elsewhere
        # Ends ``top`` when its terminal goes or a stop signal comes (``top`` in a terminal only).
        self.lifeline = lifeline

    def get_driver_class(self) -> type[Driver]:
        """Textual's terminal driver, its output guarded (:mod:`vgpumon.tui.driver`)."""
        driver = super().get_driver_class()
        if driver is LinuxDriver:
            from vgpumon.tui.driver import TerminalDriver

            return TerminalDriver
        return driver

    # ------------------------------------------------------------------ life cycle

    def on_mount(self) -> None:
        self.palette = palette_for(self.get_css_variables(), mono=self.theme == MONOCHROME.name)
        if self.lifeline is not None:
            # SIGTERM, SIGHUP and a lost terminal quit the way ``q`` does (the terminal, when
            # still there, gets its screen back), within the lifeline's deadline.
            self.lifeline.attach(asyncio.get_running_loop(), self.exit)
        # Back from ctrl+z (or an outside SIGTSTP) and ``fg``: the terminal shows whatever the
        # shell left, so every line is drawn again, not only what changed meanwhile.
        self.app_resume_signal.subscribe(self, self._redraw_all)
        if self.feed.latest is not None:
            self.take(self.feed.latest)
        if self.start_feed:
            # The feed gets a thread and loop of its own: its I/O and parsing never run here.
            self._runner = FeedThread(self.feed, self.take, asyncio.get_running_loop())
            self._runner.start()
        else:
            # Tests drive the feed's hosts on this loop themselves; take its news as it comes.
            self.feed.on_snapshot(self.take)
        self.set_interval(REDRAW_SECONDS, self._tick)
        self.switch_mode("overview")
        self._update_subtitle()

    def _redraw_all(self, _app: object = None) -> None:
        self.screen.refresh(repaint=True, layout=True)
        self.refresh(repaint=True, layout=True)
        self.dirty = True

    async def on_unmount(self) -> None:
        if self._runner is not None:
            self._runner.stop()  # waited for after the terminal is given back (stop_feed)
        if self.backfill is not None:
            # Its HTTP session lives on this loop: closed here, or aiohttp complains on stderr
            # once the terminal is back ("Unclosed client session").
            with contextlib.suppress(Exception):
                await self.backfill.close()

    def stop_feed(self, seconds: float = STOP_SECONDS) -> bool:
        """Wait at most ``seconds`` for the feed to have stopped (after :meth:`run` returned);
        True when it has, or when it never ran here."""
        if self._runner is None:
            return True
        self._runner.stop()
        return self._runner.join(seconds)

    # ------------------------------------------------------------------ data

    @property
    def multi_host(self) -> bool:
        return len(self.host_names) != 1

    def take(self, news: Fleet) -> None:
        """Take a feed's news: every host whose state changed (a host that did not change keeps
        its very object)."""
        self.host_names = news.names
        for update in news.hosts:
            if self.hosts.get(update.host) is not update:
                self._take(update)

    def _take(self, update: HostUpdate) -> None:
        """Record one update (history, events, newest state); the timer redraws later."""
        old = self.hosts.get(update.host)
        new_snapshot = self.history.record(update)
        found: list[Event] = []
        # When it happened is when it reached us: a host that never answered has no snapshot
        # time, and an unreachable host's snapshot time is that of its last good reading.
        now = self.clock()
        found += connection_events(
            update.host,
            now,
            None if old is None else old.state.value,
            update.state.value,
            update.error,
        )
        before = None if old is None else old.snapshot
        # A wedged sampler repeats its last snapshot (same time, so not "new" to the history)
        # with only its health changed: compare those too.
        health_changed = (
            before is not None
            and update.snapshot is not None
            and before.health.wedged != update.snapshot.health.wedged
        )
        if (new_snapshot or health_changed) and update.snapshot is not None:
            found += snapshot_events(update.host, before, update.snapshot, now)
        for event in found:
            self.add_event(event)
        self.hosts[update.host] = update
        self.dirty = True
        # A feed that reads only what is shown (a fleet from Prometheus) has the past of every
        # host; graphs get it when their host is shown (_tell_focus), not all at once here.
        if new_snapshot and not isinstance(self.feed, Focused):
            self._backfill(update.host)

    def _backfill(self, host: str) -> None:
        update = self.hosts.get(host)
        if self.backfill is None or host in self._backfilled or update is None:
            return
        if update.snapshot is None:
            return
        self._backfilled.add(host)
        self.run_worker(self._fill(host, update.snapshot), group="backfill")

    def local_processes(self, pids: Iterable[int]) -> dict[int, ProcInfo] | None:
        """User, command, CPU and memory of this host's processes (None: not this host's)."""
        return None if self.proc_table is None else self.proc_table.read(pids)

    @property
    def graph_window(self) -> float:
        """Seconds the graphs span: the history kept (``--history``)."""
        return self.history.maxlen * self.interval

    def add_event(self, event: Event) -> None:
        self._event_seq += 1
        self.events.append((self._event_seq, event))

    async def _fill(self, host: str, snapshot: Snapshot) -> None:
        """The host's recent past from Prometheus, in a worker: the screen never waits on it."""
        assert self.backfill is not None
        try:
            added = await self.backfill.fill(self.history, host, snapshot)
        except Exception as exc:  # noqa: BLE001 - a Prometheus problem is an event, not a crash
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            self.add_event(
                Event(snapshot.timestamp, host, "warning", f"Prometheus backfill: {reason}")
            )
        else:
            self.add_event(
                Event(
                    snapshot.timestamp,
                    host,
                    "info",
                    f"graphs filled from Prometheus ({added} points)",
                )
            )
        self.dirty = True

    def focus_now(self) -> Focus:
        """What the active screen shows (for a feed that reads only that)."""
        from vgpumon.tui.screens.base import LiveScreen

        screen = self.screen if self.screen_stack else None
        host = getattr(screen, "host", None)
        filtering = not self.filter_query.empty
        if isinstance(host, str):
            return Focus("host", (host,), filtering)
        kind = screen.FOCUS if isinstance(screen, LiveScreen) else "fleet"
        return Focus(kind, (), filtering)

    def _tell_focus(self) -> None:
        """Tell a feed that reads only what is shown what that is now, when it changed."""
        if not isinstance(self.feed, Focused):
            return
        focus = self.focus_now()
        if focus == self._focus:
            return
        self._focus = focus
        feed = self.feed
        if self._runner is not None:
            self._runner.call(lambda: feed.focus(focus))
        else:
            feed.focus(focus)
        for host in focus.hosts:
            self._backfill(host)

    def action_live(self) -> None:
        """Read the host shown (or highlighted) live from its exporter, or back from the store."""
        if not isinstance(self.feed, Focused):
            self.notify("L reads a host live when top reads the fleet from Prometheus")
            return
        host = getattr(self.screen, "host", None)
        if not isinstance(host, str):
            from vgpumon.tui.widgets.keyed_table import KeyedTable

            with contextlib.suppress(Exception):
                host = self.screen.query_one(KeyedTable).highlighted_key
        update = self.hosts.get(host) if isinstance(host, str) else None
        if update is None or not isinstance(host, str):
            return
        on = update.via != VIA_LIVE
        feed, name = self.feed, host
        if self._runner is not None:
            self._runner.call(lambda: feed.live(name, on))
        else:
            feed.live(name, on)
        self.notify(f"{host}: {'reading its exporter live' if on else 'back on Prometheus'}")

    def rows(self, host: str) -> vr.HostRows | None:
        """The host's GPU and vGPU rows of its newest snapshot, built at the first draw that
        needs them and kept until the next snapshot (keys and screens redraw from these)."""
        update = self.hosts.get(host)
        if update is None or update.snapshot is None:
            return None
        held = self._rows.get(host)
        if held is None or held.snapshot is not update.snapshot:
            held = self._rows[host] = vr.HostRows(host, update.snapshot)
        return held

    def _tick(self) -> None:
        self._tell_focus()
        if not self.dirty or self.paused:
            return
        self.dirty = False
        self._update_subtitle()
        self.redraw()

    def render_now(self) -> None:
        """Draw what has arrived without waiting for the timer (tests, screenshots)."""
        self.dirty = True
        self._tick()

    def redraw(self) -> None:
        """Draw the active screen only (hidden screens catch up when shown)."""
        from vgpumon.tui.screens.base import LiveScreen

        if not self.screen_stack:
            return  # not running yet (a theme set before start)
        screen = self.screen
        if isinstance(screen, LiveScreen):
            self.redraws += 1
            screen.refresh_data()

    def _update_subtitle(self) -> None:
        up = sum(1 for u in self.hosts.values() if u.state is HostState.UP)
        parts = [self.feed.name]
        if self.multi_host:
            parts.append(f"{up}/{len(self.host_names)} hosts up")
        if self.paused:
            parts.append("PAUSED")
        if not self.filter_query.empty:
            parts.append(f"filter: {self.filter_query}")
        self.sub_title = printable(" · ".join(parts))

    # ------------------------------------------------------------------ actions

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self._update_subtitle()
        if not self.paused:
            self.dirty = True
            self._tick()

    def action_toggle_tree(self) -> None:
        self.tree_mode = not self.tree_mode
        self.redraw()

    def action_filter(self) -> None:
        from vgpumon.tui.widgets.filter_bar import FilterBar

        with contextlib.suppress(Exception):
            self.screen.query_one(FilterBar).open(self.filter_query)

    def set_query(self, query: Query) -> None:
        self.filter_query = query
        self._update_subtitle()
        self.redraw()

    def action_refresh_source(self) -> None:
        if self._runner is not None:
            self._runner.refresh()
        else:
            self.feed.refresh()

    async def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            await self.switch_mode(mode)

    def format_title(self, title: str, sub_title: str) -> Content:
        """The header's line: the sub-title (what is shown, PAUSED, the filter) at full
        contrast, not Textual's dim one."""
        if not sub_title:
            return Content(title)
        return Content.assemble(Content(title), " — ", Content(sub_title))

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """top's own colour variables (the stylesheet reads them), before a theme sets them."""
        return {**super().get_theme_variable_defaults(), **TOP_VARIABLE_DEFAULTS}

    def get_css_variables(self) -> dict[str, str]:
        """The theme's variables, its text colours made legible where they are drawn, and top's
        own colours computed from it (:mod:`vgpumon.tui.contrast`)."""
        return legible_variables(super().get_css_variables())

    def watch_theme(self, theme: str) -> None:
        self.palette = palette_for(self.get_css_variables(), mono=theme == MONOCHROME.name)
        from vgpumon.tui.screens.base import LiveScreen

        for screen in self.screen_stack:
            if isinstance(screen, LiveScreen):
                screen.forget_cells()
        self.redraw()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume", "Freeze the screen (p)", self.action_toggle_pause)
        yield SystemCommand("Filter", "Filter rows: vm:… type:… mode:mig (/)", self.action_filter)
        yield SystemCommand(
            "Tree on / off", "Expand every GPU into its instances (t)", self.action_toggle_tree
        )
        for key, (mode, text) in enumerate(
            (
                ("overview", "Fleet or host overview"),
                ("scheduler", "vGPU scheduler: policy and shares"),
                ("licenses", "vGPU licenses, most urgent first"),
                ("events", "Event log"),
                ("help", "Every key"),
            ),
            start=1,
        ):
            yield SystemCommand(f"Show {mode}", f"{text} ({key})", self._shower(mode))
        usage = "GPU-hours, GiB-hours, kWh per VM, pod or tenant (u)"
        yield SystemCommand("Show usage", usage, self._shower("usage"))

    def _shower(self, mode: str) -> Callable[[], Awaitable[None]]:
        async def show() -> None:
            await self.action_show(mode)

        return show


def create_app(
    feed: SnapshotFeed[Fleet],
    *,
    history: History | None = None,
    start_feed: bool = True,
    interval: float = 1.0,
    theme: str | None = None,
    backfill: Backfill | None = None,
    clock: Callable[[], float] = time.time,
    usage: UsageClient | None = None,
    this_host: bool = False,
    lifeline: Lifeline | None = None,
) -> VgpumonApp:
    """The app over ``feed``; tests pass ``start_feed=False`` and drive the feed's hosts.

    ``this_host``: the feed reads this host's GPUs through the real NVML, so process ids name
    this machine's processes (``/proc`` facts, signals)."""
    app = VgpumonApp(
        feed,
        history=history,
        start_feed=start_feed,
        interval=interval,
        backfill=backfill,
        clock=clock,
        usage=usage,
        this_host=this_host,
        lifeline=lifeline,
    )
    if theme is None and wants_monochrome(app.no_color, os.environ.get("TERM")):
        theme = MONOCHROME.name  # NO_COLOR (Textual has read it: app.no_color) or a mono TERM
    if theme is not None:
        if theme not in app.available_themes:
            from vgpumon.errors import ConfigError

            known = ", ".join(sorted(app.available_themes))
            raise ConfigError(f"unknown theme {theme!r}; themes: {known}")
        app.theme = theme
    return app


if TYPE_CHECKING:

    def _conforms(app: VgpumonApp) -> TopState:
        """mypy checks here that the app is what its screens read (:mod:`vgpumon.tui.state`)."""
        return app
