"""The habits an operator brings from htop and nvitop: the footer names help as ``?``, the help
screen explains the columns and badges, Home/End/PgUp/PgDn move the cursor, Enter and → act on
the row under the cursor of the focused table, ``s`` sorts the focused table."""

from __future__ import annotations

from typing import Any

from tui_helpers import settle

from vgpumon.tui.screens.help import HelpScreen

SIZE = (120, 40)


def screen_text(app: Any) -> list[str]:
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


async def test_the_footer_names_help_as_the_question_mark(sim_host: Any) -> None:
    """The footer said ``5 help`` (a screen number) though ``?`` and F1 open it."""
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await host.cycles(2)
        await settle(pilot)
        footer = screen_text(app)[-1]
        assert "? help" in footer and "5 help" not in footer, footer
        for key in ("question_mark", "f1", "5"):
            await pilot.press("escape", key)
            await settle(pilot)
            assert isinstance(app.screen, HelpScreen), key


async def test_help_has_a_legend_of_columns_and_badges(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await settle(pilot)
        scroll = app.screen.query_one("VerticalScroll")
        seen: list[str] = []
        for _ in range(60):  # page through the help screen
            seen += screen_text(app)
            if scroll.scroll_y >= scroll.max_scroll_y:
                break
            scroll.scroll_page_down(animate=False)
            await settle(pilot)
        text = "\n".join(seen)
        assert "share/due" in text and "GPU time the vGPU got / was due" in text
        assert "unlicensed" in text and "a vGPU runs without a license" in text
