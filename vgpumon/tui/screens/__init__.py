"""The screens of ``vgpumon top``; :func:`modes` maps the number keys' modes to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.screen import Screen

from vgpumon.tui.state import TopState


def modes(app: TopState) -> dict[str, str | Callable[[], Screen[Any]]]:
    """Overview is the fleet when the feed has several hosts (or none yet), else the one host."""
    from vgpumon.tui.screens.capacity import CapacityScreen
    from vgpumon.tui.screens.events import EventsScreen
    from vgpumon.tui.screens.fleet import FleetScreen
    from vgpumon.tui.screens.help import HelpScreen
    from vgpumon.tui.screens.host import HostScreen
    from vgpumon.tui.screens.licenses import LicensesScreen
    from vgpumon.tui.screens.scheduler import SchedulerScreen
    from vgpumon.tui.screens.usage import UsageScreen

    def overview() -> Screen[None]:
        if app.multi_host:
            return FleetScreen()
        return HostScreen(app.host_names[0])

    return {
        "overview": overview,
        "scheduler": SchedulerScreen,
        "licenses": LicensesScreen,
        "events": EventsScreen,
        "help": HelpScreen,
        "usage": UsageScreen,
        "capacity": CapacityScreen,
    }
