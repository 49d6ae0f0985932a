"""Fixtures for the TUI tests (``tests/test_tui_*.py``), registered by ``tests/conftest.py``.

``tui_env`` isolates the settings and state files in the test's folder; ``session_root`` adds a
real demo session there (see ``tests.test_tui_fixtures.make_session``). Being a plugin, they are
found by name: a test module asks for them as parameters and imports nothing. The plain builders
and readers (``make_session``, ``screen_text``, ``kernel``…) stay in ``tests/test_tui_fixtures.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def tui_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the state file and config inside the test's folder."""
    monkeypatch.setenv("CUDAFORGE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CUDAFORGE_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    return tmp_path


@pytest.fixture
def session_root(tui_env: Path) -> Path:
    """``tui_env``'s ``sessions`` folder holding the demo session ``relu-demo``."""
    # Imported here, not at the top: every pytest run loads this plugin, and only the tests that
    # ask for a session should import the session repository (or fail on it).
    from tests.test_tui_fixtures import make_session

    root = tui_env / "sessions"
    make_session(root)
    return root
