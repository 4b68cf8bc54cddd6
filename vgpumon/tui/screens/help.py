"""Every key of ``vgpumon top`` (the command palette, ctrl+p, lists the actions too), and a
legend of the columns and badges (:mod:`vgpumon.view.legend`)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Markdown

from vgpumon.tui.screens.base import LiveScreen
from vgpumon.view.legend import BADGES, COLUMNS

HELP = """\
# vgpumon top

| key | does |
|---|---|
| ↑ ↓ / j k | move |
| Enter | open the host or GPU under the cursor |
| → / l | expand a GPU into its MIG or vGPU instances |
| ← / h | fold it again |
| t | tree: expand every GPU |
| Escape | back |
| / | filter: `vm:NAME license:unlicensed type:L40S mode:mig`, free words; empty clears |
| / fits:TYPE | GPUs where one more TYPE (`L40S-8Q`, `1g.10gb`) fits now; on 6, best fit first |
| s / S | sort by the next column on screen / reverse (or click a header); ▼ largest first |
| p | pause the screen (collection goes on) |
| K | signal the process under the cursor (TERM, INT or KILL, after asking; this host only) |
| r | read every host now |
| Home End PgUp PgDn | first, last row; a page up or down |
| 1 2 3 4 | overview, scheduler, licenses, events |
| ? / F1 / 5 | this help |
| 6 / c | capacity: how many more of each vGPU type and MIG profile fit, per host |
| u | usage: GPU-hours, GiB-hours, kWh per VM, pod, namespace or tenant (b: by, w: window) |
| ctrl+p | command palette: every action, themes (try *vgpumon-mono*) |
| ctrl+z | suspend (fg brings it back) |
| q / ctrl+c | quit |

Filter fields: host gpu name uuid mode badge vm type class license policy vgpu profile gi pid
process kind state user fits. Modes: baremetal passthrough vgpu-host vgpu-guest mig.
Badges: lost hung xid stale unlicensed expiring starved idle. A value NVML did not give shows as —.
"""


def legend() -> str:
    """The columns' and badges' legend as Markdown tables."""
    lines = ["## Columns", "", "| column | shows |", "|---|---|"]
    lines += [f"| {label} | {text} |" for label, text in sorted(COLUMNS.items(), key=_label_order)]
    lines += ["", "## Badges", "", "| badge | means |", "|---|---|"]
    lines += [f"| {kind} | {text} |" for kind, text in BADGES.items()]
    return "\n".join(lines) + "\n"


def _label_order(item: tuple[str, str]) -> tuple[str, str]:
    return item[0].lower(), item[0]


class HelpScreen(LiveScreen):
    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Markdown(HELP + "\n" + legend())

    def draw(self) -> None:
        """Nothing live on this screen."""
