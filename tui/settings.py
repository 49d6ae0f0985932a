"""What the workbench remembers between runs, on top of the one settings resolution.

Settings come from ``engine.config`` like every other front end's: defaults, the user file
(``$XDG_CONFIG_HOME/cudaforge/config.toml``, or ``CUDAFORGE_CONFIG``), the project's
``./cudaforge.toml``, then flags. The TUI reads ``[ui] theme``, ``[ui.keymap]`` (binding id → keys,
handed to ``App.set_keymap``) and ``[loop] approval`` from there.

What the user picks in the command palette (theme, approval policy) is remembered in
``$XDG_STATE_HOME/cudaforge/tui.json`` (``CUDAFORGE_STATE_DIR`` points elsewhere) and wins over the
files, because it is the more recent choice; a flag would win over both, but the TUI has none for
these. A broken config file is reported in the app and the defaults are used, so replay still works.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.approval import POLICIES
from engine.config import Config, ConfigError, load_config

STATE_DIR_ENV = "CUDAFORGE_STATE_DIR"
DEFAULT_THEME_SETTING = "default"


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var, "")
    return Path(value) if value and Path(value).is_absolute() else Path.home() / fallback


def state_path() -> Path:
    override = os.environ.get(STATE_DIR_ENV)
    base = Path(override).expanduser() if override else _xdg("XDG_STATE_HOME", ".local/state") / "cudaforge"
    return base / "tui.json"


@dataclass
class TuiSettings:
    """The merged view the app starts from (``theme`` None means the built-in default theme)."""

    config: Config
    theme: str | None = None
    approval_policy: str = "ask"
    keymap: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _read_state() -> dict[str, Any]:
    try:
        data = json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_settings(config: Config | None = None) -> TuiSettings:
    """``config`` as the command line resolved it (else the files), overridden by remembered choices."""
    problems: list[str] = []
    if config is None:
        try:
            config = load_config()
        except ConfigError as error:
            problems.append(f"{error}; using the defaults")
            config = Config()
    state = _read_state()
    settings = TuiSettings(config=config, problems=problems, keymap=dict(config.ui.keymap))
    theme = state.get("theme") or config.ui.theme
    settings.theme = theme if isinstance(theme, str) and theme != DEFAULT_THEME_SETTING else None
    policy = state.get("approval_policy") or config.loop.approval
    if policy in POLICIES:
        settings.approval_policy = policy
    else:
        settings.problems.append(f"unknown approval policy {policy!r} remembered; using {config.loop.approval!r}")
        settings.approval_policy = config.loop.approval
    return settings


def remember(**choices: str) -> None:
    """Merge ``choices`` into the state file (atomically; a failure to write is not an error)."""
    path = state_path()
    data = _read_state()
    data.update(choices)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(temp, path)
