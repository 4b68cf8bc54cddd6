"""Colours that stay legible in every theme ``top`` offers: text at 4.5:1 against what it is drawn
on, alarms, gauges and graph lines at 3:1 (WCAG 2's contrast ratio; alarms are bold).

A theme gives base colours (``$warning``, ``$accent``, ...) chosen for looks, not for legibility
on every background: Textual's light theme draws ``$warning`` at 1.8:1 on its surface and
``$accent`` at 1.5:1 on its background. The app
(:meth:`vgpumon.tui.app.VgpumonApp.get_css_variables`) keeps each theme's colours and moves
the ones drawn as text towards black or white, by the least that reaches the ratio against every
background they are drawn on (:func:`legible`): Textual's own (footer keys, the table cursor,
Markdown headings) and ``top``'s, the ``$vgpumon-*`` variables the stylesheet and the cell
palette (:mod:`vgpumon.tui.cells`) read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.color import Color

TEXT_RATIO = 4.5
ALARM_RATIO = 3.0  # bold alarms, gauges and graph lines
STEP = 0.02  # how far a colour moves towards black or white per try

WHITE, BLACK = Color(255, 255, 255), Color(0, 0, 0)


def luminance(colour: Color) -> float:
    """WCAG 2's relative luminance."""

    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.r) + 0.7152 * channel(colour.g) + 0.0722 * channel(colour.b)


def ratio(a: Color, b: Color) -> float:
    """WCAG 2's contrast ratio of two opaque colours, 1 to 21."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def resolve(value: str, over: Color) -> Color | None:
    """A CSS variable's colour as drawn over ``over``: ``auto 87%`` (Textual's contrasting text)
    and colours with alpha blended; None for what is no colour (``ansi_default``, a style)."""
    parts = value.split()
    if not parts:
        return None
    if parts[0] == "auto":
        alpha = float(parts[1].rstrip("%")) / 100 if len(parts) > 1 else 1.0
        return over.blend(over.get_contrast_text(1.0), alpha)
    try:
        colour = Color.parse(value)
    except Exception:  # noqa: BLE001 - a text style or another non-colour value
        return None
    if colour.ansi is not None:
        return None
    return over.blend(colour.with_alpha(1.0), colour.a) if colour.a < 1 else colour


def legible(colour: Color, backgrounds: Sequence[Color], target: float) -> Color:
    """``colour``, or the nearest colour towards black or white (whichever contrasts more with
    the backgrounds) that reaches ``target`` against every one of them."""
    if not backgrounds or min(ratio(colour, b) for b in backgrounds) >= target:
        return colour
    darkest = min(luminance(b) for b in backgrounds)
    brightest = max(luminance(b) for b in backgrounds)
    # Towards white on dark backgrounds, towards black on light ones.
    toward = WHITE if (1.05 / (brightest + 0.05)) >= ((darkest + 0.05) / 0.05) else BLACK
    step = STEP
    while step < 1:
        moved = colour.blend(toward, step)
        if min(ratio(moved, b) for b in backgrounds) >= target:
            return moved
        step += STEP
    return toward


# Textual's own text and controls: (its colour variable, the variables of what it is drawn on,
# the variable under those when they are translucent, ratio).
TEXTUAL_TEXT: tuple[tuple[str, tuple[str, ...], str, float], ...] = (
    ("foreground", ("background", "surface", "panel"), "background", TEXT_RATIO),
    ("footer-key-foreground", ("footer-background",), "background", TEXT_RATIO),
    ("footer-description-foreground", ("footer-background",), "background", TEXT_RATIO),
    ("block-cursor-foreground", ("block-cursor-background",), "surface", TEXT_RATIO),
    (
        "block-cursor-blurred-foreground",
        ("block-cursor-blurred-background",),
        "surface",
        TEXT_RATIO,
    ),
    ("markdown-h1-color", ("background", "surface"), "background", TEXT_RATIO),
    ("markdown-h2-color", ("background", "surface"), "background", TEXT_RATIO),
    ("markdown-h3-color", ("background", "surface"), "background", TEXT_RATIO),
    ("text-primary", ("background", "surface"), "background", TEXT_RATIO),
    ("text-accent", ("background", "surface"), "background", TEXT_RATIO),
    ("text-warning", ("background", "surface"), "background", TEXT_RATIO),
    ("text-error", ("background", "surface"), "background", TEXT_RATIO),
    ("text-success", ("background", "surface"), "background", TEXT_RATIO),
    # A scrollbar's thumb tells where one is: a control, 3:1 against its track.
    ("scrollbar", ("scrollbar-background",), "surface", ALARM_RATIO),
    ("scrollbar-hover", ("scrollbar-background-hover",), "surface", ALARM_RATIO),
    ("scrollbar-active", ("scrollbar-background-active",), "surface", ALARM_RATIO),
)
# Where top draws its own colours: tables ($surface, their header on $panel, a focused table
# tinted), titles and sections ($background, $boost over it).
TOP_BACKGROUNDS = ("background", "surface", "panel")
# top's colours: (its variable, the theme colour it starts from, ratio).
TOP_COLOURS: tuple[tuple[str, str, float], ...] = (
    ("vgpumon-error", "error", ALARM_RATIO),
    ("vgpumon-warning", "warning", ALARM_RATIO),
    ("vgpumon-good", "success", TEXT_RATIO),
    ("vgpumon-section", "accent", TEXT_RATIO),  # section titles, graphs and their titles
    ("vgpumon-gauge", "primary", ALARM_RATIO),
)
MUTED = "vgpumon-muted"  # de-emphasised text (an absent value's dash, a UUID): still 4.5:1
MUTED_SHARE = 0.55  # how far from the foreground towards the background it starts


def legible_variables(variables: Mapping[str, str]) -> dict[str, str]:
    """The theme's variables with its text colours made legible, and top's own colours."""
    out = dict(variables)

    def colour(name: str, over: Color) -> Color | None:
        value = out.get(name)
        return None if value is None else resolve(value, over)

    base = colour("background", BLACK)
    if base is None:  # a theme of the terminal's own colours: nothing to compute
        return {**out, **{name: out.get(source, "") for name, source, _ in TOP_COLOURS}} | {
            MUTED: out.get("foreground", "")
        }
    for name, under, over, target in TEXTUAL_TEXT:
        bottom = colour(over, base) or base
        grounds = [c for c in (colour(u, bottom) for u in under) if c is not None]
        text = colour(name, grounds[0] if grounds else bottom)
        if text is not None and grounds:
            out[name] = legible(text, grounds, target).hex
    grounds = [c for c in (colour(u, base) for u in TOP_BACKGROUNDS) if c is not None]
    for name, source, target in TOP_COLOURS:
        start = colour(source, base)
        out[name] = (legible(start, grounds, target) if start is not None else WHITE).hex
    fore = colour("foreground", base) or base.get_contrast_text(1.0)
    out[MUTED] = legible(fore.blend(base, MUTED_SHARE), grounds, TEXT_RATIO).hex
    return out
