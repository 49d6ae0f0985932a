"""The cudaforge themes: a dark one, a light one and one that uses only the 16 ANSI colours.

Why our own and not only Textual's built-ins: the workbench colours statuses (correct, failing,
best) through ``$success``/``$error``/``$accent``, so each theme is chosen to keep those three
distinct; the ANSI theme lets the terminal's own palette decide, which is the only thing that
looks right on a 16-colour console or a terminal with a custom palette over SSH.
"""

from __future__ import annotations

from textual.theme import Theme

DARK = "cudaforge-dark"
LIGHT = "cudaforge-light"
ANSI = "cudaforge-16"
DEFAULT_THEME = DARK

THEMES: tuple[Theme, ...] = (
    Theme(
        name=DARK,
        primary="#76B900",  # a green that reads as "GPU" without copying anyone's palette
        secondary="#4FA3D1",
        accent="#E0A526",
        warning="#E0A526",
        error="#E5534B",
        success="#57AB5A",
        foreground="#D7DAE0",
        background="#16181D",
        surface="#1E2128",
        panel="#262A33",
        dark=True,
    ),
    Theme(
        name=LIGHT,
        primary="#3F7A00",
        secondary="#1F6FA8",
        accent="#A0650A",
        warning="#A0650A",
        error="#C0312B",
        success="#2D7D32",
        foreground="#1D2026",
        background="#F7F7F4",
        surface="#EDEDE8",
        panel="#E0E0D8",
        dark=False,
    ),
    Theme(
        name=ANSI,
        primary="ansi_green",
        secondary="ansi_cyan",
        accent="ansi_yellow",
        warning="ansi_yellow",
        error="ansi_red",
        success="ansi_green",
        foreground="ansi_default",
        background="ansi_default",
        surface="ansi_default",
        panel="ansi_default",
        boost="ansi_default",
        dark=True,
        variables={
            "ansi-background": "ansi_black",
            "ansi-foreground": "ansi_white",
            "border-blurred": "ansi_bright_black",
            "block-cursor-foreground": "ansi_black",
            "block-cursor-background": "ansi_white",
            "input-cursor-background": "ansi_white",
            "input-cursor-foreground": "ansi_black",
            "input-selection-background": "ansi_blue",
            "screen-selection-background": "ansi_blue",
            "screen-selection-foreground": "ansi_white",
        },
        ansi=True,
    ),
)

THEME_NAMES: tuple[str, ...] = tuple(theme.name for theme in THEMES)


def theme_by_name(name: str) -> Theme | None:
    for theme in THEMES:
        if theme.name == name:
            return theme
    return None
