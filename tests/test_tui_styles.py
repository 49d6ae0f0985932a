"""The TUI's styles live in per-screen .tcss files (tui/styles/), and the themes still colour them."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from tui.app import CudaforgeApp
from tui.widgets.footer import KeyFooter

STYLES = REPO / "tui" / "styles"


def test_no_inline_styles_remain_and_every_css_path_exists() -> None:
    inline = [p.relative_to(REPO).as_posix() for p in (REPO / "tui").rglob("*.py") if "DEFAULT_CSS" in p.read_text()]
    assert inline == []
    for path in (REPO / "tui").rglob("*.py"):
        for rel in re.findall(r'CSS_PATH = "([^"]+)"', path.read_text()):
            assert (path.parent / rel).resolve().is_file(), f"{path}: {rel}"


@pytest.mark.asyncio
async def test_themes_colour_the_styles_from_the_tcss_files(session_root) -> None:
    backgrounds = {}
    for theme in ("cudaforge-dark", "cudaforge-light"):
        app = CudaforgeApp(sessions_root=session_root)
        async with app.run_test(size=(100, 30)) as pilot:
            app.theme = theme
            await pilot.pause()
            footer = app.screen.query_one(KeyFooter)
            assert footer.styles.dock == "bottom" and footer.styles.height.value == 1  # from app.tcss
            backgrounds[theme] = footer.styles.background
    assert backgrounds["cudaforge-dark"] != backgrounds["cudaforge-light"]
