"""Colour that reads: every theme ``top`` offers keeps text at 4.5:1 and alarms, gauges and graph
lines at 3:1 against what they are drawn on (WCAG 2's contrast ratio), computed from the
stylesheet and each theme's variables, and measured on drawn screens; ``NO_COLOR`` and a
monochrome ``TERM`` start in the monochrome theme, where alarms are bold and reversed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rich.color import Color as RichColor
from rich.style import Style
from textual.color import Color
from tui_helpers import settle

from vgpumon.tui.app import VgpumonApp
from vgpumon.tui.contrast import ALARM_RATIO, TEXT_RATIO, TEXTUAL_TEXT, ratio, resolve
from vgpumon.tui.themes import MONOCHROME, wants_monochrome

STYLESHEET = Path(__file__).parents[2] / "vgpumon" / "tui" / "vgpumon.tcss"
# top's colours and what each must reach against the tables and titles it is drawn on.
TOP_TEXT = {
    "vgpumon-section": TEXT_RATIO,
    "vgpumon-good": TEXT_RATIO,
    "vgpumon-muted": TEXT_RATIO,
    "foreground": TEXT_RATIO,
    "vgpumon-error": ALARM_RATIO,
    "vgpumon-warning": ALARM_RATIO,
    "vgpumon-gauge": ALARM_RATIO,
}
GROUNDS = ("background", "surface", "panel")


def test_the_ratio_on_known_answers() -> None:
    assert ratio(Color(0, 0, 0), Color(255, 255, 255)) == pytest.approx(21.0)
    assert ratio(Color(119, 119, 119), Color(255, 255, 255)) == pytest.approx(4.48, abs=0.01)
    assert ratio(Color(10, 20, 30), Color(10, 20, 30)) == pytest.approx(1.0)


def test_the_stylesheet_colours_text_only_with_checked_variables() -> None:
    """A ``color:`` in the stylesheet names a variable this test checks in every theme (a
    theme's raw ``$warning`` or ``$accent`` is not legible everywhere: textual-light's at 1.8:1
    and 1.5:1)."""
    used = re.findall(r"(?<![-\w])color:\s*\$([\w-]+)", STYLESHEET.read_text())
    assert used, "the stylesheet colours nothing?"
    checked = set(TOP_TEXT) | {name for name, *_ in TEXTUAL_TEXT}
    assert set(used) <= checked, set(used) - checked


def test_every_offered_theme_keeps_text_and_alarms_legible(sim_host: Any) -> None:
    app = sim_host("kvm-vgpu-timesliced").app()
    themes = sorted(app.available_themes)
    assert "textual-light" in themes and MONOCHROME.name in themes
    # The terminal's own sixteen colours: their contrast is the terminal's, unknown here.
    assert "textual-ansi" not in themes
    low: list[str] = []
    for theme in themes:
        app.theme = theme
        variables = app.get_css_variables()
        base = resolve(variables["background"], Color(0, 0, 0))
        assert base is not None, theme
        grounds = [resolve(variables[g], base) for g in GROUNDS]
        for name, need in TOP_TEXT.items():
            colour = resolve(variables[name], base)
            assert colour is not None, (theme, name)
            got = min(ratio(colour, g) for g in grounds if g is not None)
            if got < need:
                low.append(f"{theme} {name} {got:.2f} < {need}")
        for name, under, over, need in TEXTUAL_TEXT:
            bottom = resolve(variables[over], base) or base
            for u in under:
                ground = resolve(variables[u], bottom)
                colour = resolve(variables[name], ground or bottom)
                if ground is not None and colour is not None and ratio(colour, ground) < need:
                    low.append(f"{theme} {name} on {u} {ratio(colour, ground):.2f} < {need}")
    assert not low, "\n".join(low)


def _rgb(colour: RichColor | None, default: tuple[int, int, int]) -> Color:
    if colour is None or colour.triplet is None:
        return Color(*default)
    t = colour.triplet
    return Color(t.red, t.green, t.blue)


GRAPHIC = re.compile(r"^[\s\u2580-\u259f\u2800-\u28ff·…]+$")  # bars, blocks, braille graphs
# Borders and rules (box drawing, a panel's edge) are decoration, which WCAG leaves free.
DECORATION = re.compile(r"^[\s\u2500-\u257f▏▕]+$")


def _drawn_contrast(app: VgpumonApp) -> tuple[list[str], int]:
    """Every drawn segment's contrast: the ones below their need, and how many alarms were seen."""
    variables = app.get_css_variables()
    alarms = {
        resolve(variables[name], Color(0, 0, 0)) for name in ("vgpumon-error", "vgpumon-warning")
    }
    low: list[str] = []
    seen_alarms = 0
    for strip in app.screen._compositor.render_strips():
        for text, style, _ in strip:
            if not text.strip() or not isinstance(style, Style) or DECORATION.match(text):
                continue
            fg = _rgb(style.color, (255, 255, 255))
            bg = _rgb(style.bgcolor, (0, 0, 0))
            if style.reverse:
                fg, bg = bg, fg
            alarm = fg in alarms or bool(style.reverse and style.bold)
            seen_alarms += alarm
            need = ALARM_RATIO if alarm or GRAPHIC.match(text) else TEXT_RATIO
            if ratio(fg, bg) < need:
                low.append(f"{ratio(fg, bg):.2f} < {need}: {text.strip()[:30]!r} {style}")
    return low, seen_alarms


@pytest.mark.parametrize("theme", ["textual-light", "textual-dark", MONOCHROME.name])
async def test_drawn_screens_keep_the_ratios(sim_host: Any, theme: str) -> None:
    """The host screen with a lost GPU (alarms), the GPU screen (graphs, gauges) and help, as
    drawn: textual-light drew warnings at 1.8:1 and section titles at 1.5:1."""
    host = sim_host("fault-gpu-lost")
    app = host.app(theme=theme)
    low: list[str] = []
    alarms = 0
    async with app.run_test(size=(120, 40)) as pilot:
        for t in (0, 12, 41):
            await host.at(t)
        await settle(pilot)
        for keys in ((), ("enter",), ("escape", "question_mark")):
            for key in keys:
                await pilot.press(key)
            await settle(pilot)
            found, seen = _drawn_contrast(app)
            low += found
            alarms += seen
    assert alarms, "no alarm was drawn: the check would prove nothing"
    assert not low, "\n".join(sorted(set(low)))


@pytest.mark.parametrize(
    ("no_color", "term", "mono"),
    [
        (True, "xterm-256color", True),
        (False, "dumb", True),
        (False, "xterm-mono", True),
        (False, "vt100-m", True),
        (False, "xterm-256color", False),
        (False, "tmux-256color", False),
        (False, None, False),
    ],
)
def test_monochrome_terminals_are_told(no_color: bool, term: str | None, mono: bool) -> None:
    assert wants_monochrome(no_color, term) is mono


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}, {"TERM": "xterm-mono"}])
async def test_no_color_and_mono_terms_start_monochrome_with_bold_reversed_alarms(
    sim_host: Any, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    """Under NO_COLOR Textual greys every colour: red alarms came out dimmer than text."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    host = sim_host("fault-gpu-lost")
    app = host.app()
    assert app.theme == MONOCHROME.name
    async with app.run_test(size=(120, 40)) as pilot:
        for t in (0, 12, 41):
            await host.at(t)
        await settle(pilot)
        assert app.palette.error == "bold reverse"
        reversed_alarms = [
            text
            for strip in app.screen._compositor.render_strips()
            for text, style, _ in strip
            if isinstance(style, Style) and style.reverse and style.bold and text.strip()
        ]
        assert reversed_alarms, "the lost GPU's alarm is not drawn bold and reversed"


async def test_an_explicit_theme_wins_over_a_mono_term(
    sim_host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERM", "xterm-mono")
    app = sim_host("kvm-vgpu-timesliced").app(theme="nord")
    assert app.theme == "nord"
