"""Shared parts of the fault-injection tests (tests/test_interrupt_*.py): real processes, real signals.

A run is held at a named stage boundary by ``engine.loop.holds`` (``CUDAFORGE_TEST_HOLD``): the
process writes ``STAGE@N PID`` to a hold file and waits while it exists, so a signal or a key lands
exactly at that boundary; the test deletes the file to let the process go on. Everything else is
the product as a person runs it: the ``cudaforge`` command line, the project's ``cudaforge.toml``,
the scripted agents, the evaluator's CPU build (cached by content) and the session repository.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from sessions.records import REQUIRED_FILES
from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, REPO, python_path

STEADY = REPO / "tests" / "fixtures" / "scripted" / "steady"
TASK = EXAMPLES / "tasks" / "relu.py"

# what a person would put in ./cudaforge.toml for a quick CPU session with scripted agents
CONFIG = (
    '[sessions]\ndir = "{sessions}"\n'
    '[models]\ncoder = "scripted/{steady}/coder"\njudge = "scripted/{steady}/judge"\n'
    '[loop]\nrounds = {rounds}\napproval = "auto"\n'
    # a resumed process's scripted Coder starts its replies over, so it repeats kernels the session
    # holds: told of each, it reaches its next new one as the uninterrupted run did (engine.loop.duplicates)
    'repeat_asks = 4\n'
    '[eval]\ndevice = "cpu"\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n'
)


class Project:
    """A project folder with its cudaforge.toml, its sessions folder and an isolated environment."""

    def __init__(self, tmp_path: Path, cache: Path, rounds: int) -> None:
        self.root = tmp_path / "project"
        self.root.mkdir(parents=True)
        self.sessions = tmp_path / "sessions"
        self.home = tmp_path
        self.cache = cache
        (self.root / "cudaforge.toml").write_text(
            CONFIG.format(sessions=self.sessions, steady=STEADY, rounds=rounds)
        )
        shutil.copy(TASK, self.root / "relu.py")
        self._holds = 0

    def env(self, hold: str = "", hold_file: Path | None = None) -> dict[str, str]:
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": python_path(),
            "CUDAFORGE_CACHE_DIR": str(self.cache),
            "XDG_CONFIG_HOME": str(self.home / "config"),
            "XDG_STATE_HOME": str(self.home / "state"),
            "XDG_DATA_HOME": str(self.home / "data"),
            "HOME": os.environ.get("HOME", str(self.home)),
            "TERM": "xterm-256color",
            "CUDAFORGE_NO_ANIMATION": "1",
            "LANG": "C.UTF-8",
            "CUDAFORGE_KEEP_SERVER_S": os.environ.get("CUDAFORGE_KEEP_SERVER_S", "0"),  # tests/conftest.py
        }
        if hold:
            env["CUDAFORGE_TEST_HOLD"] = hold
            env["CUDAFORGE_TEST_HOLD_FILE"] = str(hold_file)
        return env

    def hold_file(self) -> Path:
        self._holds += 1
        return self.home / f"hold-{self._holds}"

    def session_dir(self) -> Path:
        found = [p.parent for p in self.sessions.glob("*/HEAD")]
        assert len(found) == 1, found
        return found[0]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tui.cli", *args]


def wait_for_hold(hold_file: Path, name: str, alive: object, seconds: float = 120) -> int:
    """Wait until the process is held at ``name``; return its pid (``alive()`` False: it ended first)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            text = hold_file.read_text().split()
        except FileNotFoundError:
            text = []
        if text and text[0] == name:
            return int(text[1])
        assert alive(), f"the process ended before reaching {name}"
        time.sleep(0.05)
    raise AssertionError(f"never held at {name}")


def press_until_held(press: object, hold_file: Path, name: str, alive: object, seconds: float = 120) -> int:
    """Press a key (``press()``) until the process is held at ``name``: a key typed before the app
    has drawn its first screen is not lost, but may reach the screen before it listens."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        press()
        try:
            return wait_for_hold(hold_file, name, alive, seconds=3)
        except AssertionError:
            if not alive():
                raise
    raise AssertionError(f"never held at {name}")


def release(hold_file: Path) -> None:
    hold_file.unlink(missing_ok=True)


def history(session_dir: Path) -> list[tuple[int, str, str]]:
    with SessionRepo.open(session_dir) as session:
        return [(it.number, it.phase, it.status) for it in session.history()]


def assert_sound(session_dir: Path) -> None:
    """``git fsck`` accepts the repository and every iteration it lists is complete."""
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--strict", "--no-dangling"],
        cwd=session_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    with SessionRepo.open(session_dir) as session:
        items = session.history()
        assert [it.number for it in items] == list(range(len(items)))
        for item in items:
            assert set(REQUIRED_FILES) <= set(item.files())
            assert item.eval_result["status"] == item.status


def journal(session_dir: Path) -> dict | None:
    import json

    path = session_dir / "cudaforge-loop.json"
    return json.loads(path.read_text()) if path.exists() else None


# ---------------------------------------------------------------------- headless


class Headless:
    """``cudaforge run … --headless`` in its own process group, as a terminal's foreground job:
    a Ctrl-C is SIGINT to the whole group, as the terminal sends it."""

    def __init__(self, project: Project, args: list[str], hold: str = "") -> None:
        self.hold_file = project.hold_file()
        self.proc = subprocess.Popen(
            cli("run", *args, "--headless", "--auto-approve"),
            cwd=project.root,
            env=project.env(hold, self.hold_file),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def held(self, name: str) -> int:
        return wait_for_hold(self.hold_file, name, self.alive)

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)

    def signal_group(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def kill_9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    def wait_line(self, needle: str, seconds: float = 60) -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if needle in line:
                    return line
            if not self.alive():
                # it has exited: what it printed last may still be in the reader's hands (a loaded machine)
                self._reader.join(timeout=10)
                assert needle in self.text, f"{needle!r} never printed:\n{self.text}"
                return next(line for line in self.text.splitlines() if needle in line)
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never printed:\n{self.text}")

    def finish(self, seconds: float = 300) -> int:
        code = self.proc.wait(timeout=seconds)
        self._reader.join(timeout=10)
        release(self.hold_file)
        return code


# ---------------------------------------------------------------------- the TUI in a real terminal


def words(text: str) -> str:
    """Letters, digits and punctuation kept; everything else (box drawing, line breaks) one space."""
    kept = "".join(ch if ch.isalnum() or ch in ".,:;()'—-_/%+" else " " for ch in text)
    return " ".join(kept.split())


class Tmux:
    """The TUI in a tmux pane (a real terminal): keys typed, the screen read back, the exit code echoed."""

    def __init__(self, project: Project, args: list[str], hold: str = "", width: int = 120) -> None:
        self.hold_file = project.hold_file()
        self.socket = f"cf-interrupt-{os.getpid()}"
        self.name = f"s{project._holds}"
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in project.env(hold, self.hold_file).items())
        # after a kill -9 the terminal is left raw and on the alternate screen, as a person would
        # find it; the pane restores it before echoing the exit code, so the code can be read back
        command = (
            f"cd {shlex.quote(str(project.root))} && env -i {exports} "
            f"{shlex.join(cli(*args))}; code=$?; stty sane 2>/dev/null; printf '\\033[?1049l\\033[?25h'; "
            "echo; echo EXITED $code; sleep 120"
        )
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", "40", command)

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        return done.stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-t", self.name)

    def flat(self) -> str:
        """The screen as words: box drawing and line breaks (a wrapped notice) become single spaces,
        then the notices alone (a notice's rows, from its ``▌`` border on, share rows with the panes
        beside it, so a notice wrapped over several rows reads as one text only when cut out)."""
        screen = self.screen()
        notices = [row[row.rindex("▌") + 1 :] for row in screen.splitlines() if "▌" in row]
        return words(screen) + " | " + words(" ".join(notices))

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def wait_screen(self, needle: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if words(needle) in self.flat():
                return
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} never shown:\n{self.screen()}")

    def exit_code(self, seconds: float = 120) -> int:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = re.search(r"EXITED (\d+)", self.screen())
            if found:
                return int(found.group(1))
            time.sleep(0.1)
        raise AssertionError(f"the app never exited:\n{self.screen()}")

    def alive(self) -> bool:
        return "EXITED " not in self.screen()

    def held(self, name: str) -> int:
        return wait_for_hold(self.hold_file, name, self.alive)

    def press_until_held(self, key: str, name: str) -> int:
        return press_until_held(lambda: self.keys(key), self.hold_file, name, self.alive)

    def close(self) -> None:
        release(self.hold_file)
        socket_path = self._tmux("display-message", "-p", "#{socket_path}").strip()
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)
        if socket_path:
            Path(socket_path).unlink(missing_ok=True)


CTTY_EXEC = "import fcntl,os,sys,termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"


class Pty:
    """The TUI on a pseudo-terminal whose other end the test holds, as sshd does: closing it is a
    dropped connection (the kernel sends SIGHUP to the TUI, the terminal's controlling process)."""

    def __init__(self, project: Project, args: list[str], hold: str = "") -> None:
        import fcntl
        import termios

        self.hold_file = project.hold_file()
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CTTY_EXEC, *cli(*args)],
            cwd=project.root,
            env=project.env(hold, self.hold_file),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.output = bytearray()
        self._open = True
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while self._open:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.output.extend(chunk)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def held(self, name: str) -> int:
        return wait_for_hold(self.hold_file, name, self.alive)

    def keys(self, data: bytes) -> None:
        os.write(self.master, data)

    def press_until_held(self, data: bytes, name: str) -> int:
        return press_until_held(lambda: self.keys(data), self.hold_file, name, self.alive)

    def stop_reading(self) -> None:
        """Read no more of the app's output (a stalled connection): its writes block once the
        terminal's buffers are full."""
        self._open = False
        self._reader.join(timeout=5)

    def resize(self, rows: int, columns: int) -> None:
        """Change the terminal's size, as the user's terminal window does (SIGWINCH: a full redraw)."""
        import fcntl
        import termios

        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def hang_up(self) -> None:
        """Close the terminal's other end: the connection dropped."""
        self.stop_reading()
        os.close(self.master)

    def finish(self, seconds: float = 300) -> int:
        code = self.proc.wait(timeout=seconds)
        release(self.hold_file)
        return code
