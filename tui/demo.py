"""``cudaforge demo``: replay a session that ships inside the package.

The session was recorded by running the real engine on an H200 machine (2026-11-30) with scripted
Coder and Judge replies (``tui/demo/script``): its builds, checks, timings and Nsight Compute
metrics are real, the agents' words are not. It is stored as a git bundle and cloned into a
fresh folder each time, so it needs no GPU, no API key and no network.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from sessions.message import FORMAT_VERSION
from sessions.paths import MARKER_CONFIG_SECTION

BUNDLE = Path(__file__).parent / "demo" / "relu-demo.bundle"
SESSION_NAME = "relu-demo"
NOTICE = (
    "Scripted demo: the agents' replies are scripted; builds, checks, timings and NCU metrics are "
    "real (H200). n/p step · space play · ? help · q quit"
)


class DemoError(Exception):
    """The bundled demo session could not be unpacked."""


def unpack(target_root: Path | None = None) -> Path:
    """Clone the bundled session into ``target_root`` (a new temporary folder by default)."""
    root = Path(target_root) if target_root else Path(tempfile.mkdtemp(prefix="cudaforge-demo-"))
    destination = root / SESSION_NAME
    if not BUNDLE.is_file():
        raise DemoError(f"the demo bundle is missing from the installation: {BUNDLE}")
    done = subprocess.run(
        ["git", "clone", "--quiet", "--bare", str(BUNDLE), str(destination)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise DemoError(f"git could not unpack the demo session: {done.stderr.strip()}")
    # A clone does not carry the repository config that marks a folder as a cudaforge session.
    for key, value in (("format", str(FORMAT_VERSION)), ("task", "relu_large"), ("demo", "true")):
        subprocess.run(
            ["git", "-C", str(destination), "config", f"{MARKER_CONFIG_SECTION}.{key}", value],
            check=True,
            timeout=30,
        )
    return destination
