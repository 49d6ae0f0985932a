"""``cudaforge demo --serve`` for real: the textual-serve web server as a subprocess, its page over
HTTP, the app started through its websocket, then a clean shutdown. Skipped without textual-serve."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import python_path

pytest.importorskip("textual_serve")  # the `serve` extra; aiohttp comes with it

from tui import commands  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[A-Za-z]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>]")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode("utf-8")


@pytest.fixture
def served_demo(tui_env: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``python -m tui.cli demo --serve --port P`` running until the test ends, and P."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": python_path(), "TMPDIR": str(tui_env)}  # demo copies land in tmp_path
    server = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "demo", "--serve", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield server, port
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)


def _wait_for_page(server: subprocess.Popen[str], url: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(
                f"the server exited with {server.returncode}: {server.stdout.read() if server.stdout else ''}"
            )
        try:
            status, page = _get(url)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
            continue
        assert status == 200
        return page
    pytest.fail(f"no page at {url} after {timeout:.0f} s")


async def _run_app_over_websocket(url: str, timeout: float = 45.0) -> tuple[str, bool]:
    """What the app drew through the websocket (ANSI stripped), and whether quitting closed it."""
    import aiohttp

    screen = ""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=10)) as ws,
    ):
        deadline = time.monotonic() + timeout
        drawn = b""
        while time.monotonic() < deadline and "iter 0 (main)" not in screen:
            message = await ws.receive(timeout=deadline - time.monotonic())
            if message.type == aiohttp.WSMsgType.BINARY:
                drawn += message.data
                screen = " ".join(ANSI.sub(" ", drawn.decode("utf-8", "replace")).split())
            elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                break
        await ws.send_str(json.dumps(["stdin", "q"]))  # the app's own quit key
        closed = False
        while time.monotonic() < deadline + 15:
            message = await ws.receive(timeout=15)
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                closed = True
                break
    return screen, closed


def test_demo_serve_serves_the_app_page_and_runs_the_app_over_its_websocket(served_demo) -> None:
    server, port = served_demo
    page = _wait_for_page(server, f"http://localhost:{port}/")
    assert re.search(r"<div>\s*cudaforge\s*</div>", page)  # textual-serve's app page, named for us
    assert f'data-session-websocket-url="ws://localhost:{port}/ws"' in page  # where its terminal connects
    status, script = _get(f"http://localhost:{port}/static/js/textual.js")  # the terminal it loads
    assert status == 200 and len(script) > 10_000

    screen, closed = asyncio.run(_run_app_over_websocket(f"ws://localhost:{port}/ws?width=120&height=40"))
    assert "cudaforge" in screen and "kernel · iter 0 (main)" in screen  # the demo session, replayed
    assert "scripted demo" in screen.lower()  # the notice, and the status line after it fades
    assert closed  # `q` quit the app and textual-serve closed the socket

    server.send_signal(signal.SIGINT)  # Ctrl-C: textual-serve's graceful exit
    assert server.wait(20) == 0
    output = server.stdout.read() if server.stdout else ""
    assert f"http://localhost:{port}" in output  # it said where it served


def test_port_option_defaults_to_8000_and_rejects_non_ports() -> None:
    parser = commands.argparse.ArgumentParser(prog="cudaforge")
    commands.register(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["demo", "--serve"]).port == commands.SERVE_PORT == 8000
    assert parser.parse_args(["replay", "s", "--serve", "--port", "8123"]).port == 8123
    for bad in ("0", "70000", "http"):
        with pytest.raises(SystemExit):
            parser.parse_args(["demo", "--port", bad])
