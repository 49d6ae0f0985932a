"""What the workbench remembers between runs and what the user configures for it.

Two files, two owners:

* ``$XDG_CONFIG_HOME/cudaforge/config.toml`` (the user's, never written by us): a ``[tui]`` table
  with ``theme``, ``approval_policy`` and a ``[tui.keymap]`` table mapping binding ids to keys
  (``quit = "ctrl+q"``), which is handed to ``App.set_keymap``.
* ``$XDG_STATE_HOME/cudaforge/tui.json`` (ours): the last theme and approval policy picked in the
  palette. A remembered choice wins over the config default, because it is the more recent one.

``CUDAFORGE_CONFIG`` and ``CUDAFORGE_STATE_DIR`` point elsewhere (tests use them to stay isolated).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

POLICIES = ("ask", "auto", "ask-if-flagged")
DEFAULT_POLICY = "ask"
CONFIG_ENV = "CUDAFORGE_CONFIG"
STATE_DIR_ENV = "CUDAFORGE_STATE_DIR"


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var, "")
    return Path(value) if value and Path(value).is_absolute() else Path.home() / fallback


def config_path() -> Path:
    override = os.environ.get(CONFIG_ENV)
    if override:
        return Path(override).expanduser()
    return _xdg("XDG_CONFIG_HOME", ".config") / "cudaforge" / "config.toml"


def state_path() -> Path:
    override = os.environ.get(STATE_DIR_ENV)
    base = Path(override).expanduser() if override else _xdg("XDG_STATE_HOME", ".local/state") / "cudaforge"
    return base / "tui.json"


@dataclass
class TuiSettings:
    """The merged view the app starts from."""

    theme: str | None = None
    approval_policy: str = DEFAULT_POLICY
    keymap: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _read_config() -> tuple[dict[str, Any], list[str]]:
    path = config_path()
    if not path.is_file():
        return {}, []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        return {}, [f"ignored {path}: {error}"]
    tui = data.get("tui", {})
    return (tui if isinstance(tui, dict) else {}), []


def _read_state() -> dict[str, Any]:
    try:
        data = json.loads(state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_settings() -> TuiSettings:
    """Config defaults, overridden by remembered choices; bad values are reported, not fatal."""
    config, problems = _read_config()
    state = _read_state()
    settings = TuiSettings(problems=problems)
    theme = state.get("theme") or config.get("theme")
    settings.theme = theme if isinstance(theme, str) else None
    policy = state.get("approval_policy") or config.get("approval_policy") or DEFAULT_POLICY
    if policy in POLICIES:
        settings.approval_policy = policy
    else:
        settings.problems.append(f"unknown approval_policy {policy!r}; using {DEFAULT_POLICY!r}")
    keymap = config.get("keymap", {})
    if isinstance(keymap, dict):
        settings.keymap = {str(k): str(v) for k, v in keymap.items()}
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
