"""Acceptance (issue #23): a new user's whole journey in a real terminal, driven by keys, at 120×40 and 80×24.

new session → step the seed → run rounds → approve, reject, edit a suggestion → edit the kernel →
branch → add rounds on the branch → quit mid-build → reopen from the browser (Escape and ``o``
twice) → resume → replay; the screen is captured and asserted at every step (status-line wording,
iteration numbers, tree order).

Everything is real: tmux (a private server, so Escape is not held back by tmux's escape-time),
the console entry point, the project's cudaforge.toml, the loop, the evaluator's CPU worker (every
kernel reuses examples/kernels/relu_cpu.py's C++ byte for byte, so the build comes from the shared
cache), the session repo and its writer lock, and the ``openai`` client, talking to
tests/fake_llm_server.py on loopback: the Coder (model ``cf-coder``) answers kernels, the Judge
(``cf-judge``) numbered ideas, in whatever order the keys ask for them.

Quitting while a build runs and reopening the session in the same process are also worked on in
another branch (the loop's side of quit-during-build, and the lock re-acquired by its own process):
these steps assert the behaviour a user needs, whichever side provides it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessions.repo import SessionRepo
from tests.conftest import EXAMPLES, python_path, until
from tests.fake_llm_server import CHAT, FakeLLMServer, FakeResponse, RecordedRequest, chat_sse

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (.ci/run installs it)"),
]

KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()
SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


class Agents:
    """The fake server's answers: the Coder writes the example kernel (one comment differs), the
    Judge proposes idea 1, 2, 3 … (numbered across the whole journey)."""

    def __init__(self) -> None:
        self.ideas = 0
        self.kernels = 0

    def __call__(self, request: RecordedRequest) -> FakeResponse:
        model = str((request.body or {}).get("model", ""))
        if model == "cf-judge":
            self.ideas += 1
            reply = json.dumps(
                {
                    "key_metrics": ["speedup"],
                    "bottleneck": f"IDEA {self.ideas}: the scalar loop",
                    "optimization_method": f"method {self.ideas}",
                    "modification_plan": "keep the C++ loop, adjust the Python wrapper",
                }
            )
        else:
            self.kernels += 1
            # each reply a new kernel (a comment alone would make it a repeat, which is not built)
            reply = f"Here is the kernel.\n\n```python\n{KERNEL}REPLY = {self.kernels}\n```\n"
        pieces = [reply[i : i + 400] for i in range(0, len(reply), 400)]
        return FakeResponse(sse=chat_sse(pieces, model=model, prompt_tokens=900, completion_tokens=300))


class Terminal:
    """One tmux session on a private server: keys in, screens out, every screen asserted kept."""

    def __init__(self, name: str, size: tuple[int, int], log: Path) -> None:
        self.socket, self.name, self.size, self.log = name, name, size, log
        self.last = ""

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)

    def start(self, command: str) -> None:
        width, height = self.size
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height), command)
        self.tmux("set-option", "-s", "escape-time", "0")

    def close(self) -> None:
        self.tmux("kill-server")

    def screen(self) -> str:
        self.last = self.tmux("capture-pane", "-p", "-t", self.name).stdout
        return self.last

    def keys(self, *keys: str) -> None:
        for key in keys:
            self.tmux("send-keys", "-t", self.name, key)
            time.sleep(0.15)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        time.sleep(0.2)

    def wait(self, step: str, *texts: str, seconds: float = 90.0) -> str:
        """Wait until every text is on screen (whitespace runs count as one space); keep the capture."""
        deadline = time.monotonic() + seconds
        while True:
            screen = self.screen()
            flat = " ".join(screen.split())
            if all(" ".join(t.split()) in flat for t in texts):
                with self.log.open("a", encoding="utf-8") as out:
                    out.write(f"=== {step} ({self.size[0]}x{self.size[1]})\n{screen}\n")
                return screen
            if time.monotonic() > deadline:
                missing = [t for t in texts if " ".join(t.split()) not in flat]
                raise AssertionError(f"{step}: {missing} not on screen:\n{screen}")
            time.sleep(0.3)


def status_line(screen: str) -> str:
    """The status line: the row above the key footer."""
    rows = [row for row in screen.splitlines() if row.strip()]
    return rows[-2].strip()


def timeline(term: Terminal, wide: bool) -> list[str]:
    """The timeline's rows, in screen order, cut out of the screen at its column (at 80×24 its tab is
    shown first with ``t``, and the kernel's tab again after)."""
    if not wide:
        term.keys("t")
    screen = term.wait("timeline", "▼ main", "from-iter-2 (from #2)")  # once the notices have faded
    rows = screen.splitlines()
    column = next(row.index("▼ main") for row in rows if "▼ main" in row)
    tree = [re.sub(r"[│╭╮╰╯]", " ", row[column:]).strip() for row in rows]
    tree = [row for row in tree if row.startswith(("▼", "├", "└")) or re.match(r"^\s*[├└]", row)]
    if not wide:
        term.keys("[", "[", "[", "[")  # back to the kernel tab
    return tree


@pytest.mark.parametrize("size", SIZES)
def test_a_new_users_journey(tmp_path: Path, ext_cache: Path, size: tuple[int, int]) -> None:
    wide = size[0] >= 110
    project, sessions = tmp_path / "project", tmp_path / "sessions"
    project.mkdir()
    shutil.copy(EXAMPLES / "tasks" / "relu.py", project / "relu.py")
    agents = Agents()
    with FakeLLMServer() as server:
        server.respond(CHAT, agents)
        (project / "cudaforge.toml").write_text(
            f'[sessions]\ndir = "{sessions}"\n'
            '[models]\ncoder = "openai/cf-coder"\njudge = "openai/cf-judge"\n'
            f'[providers.openai]\nbase_url = "{server.openai_base_url}"\nmax_retries = 0\n'
            '[loop]\nrounds = 2\n[eval]\ndevice = "cpu"\ntrials = 2\ntiming_trials = 5\n'
        )
        env = {
            "PYTHONPATH": python_path(),
            "CUDAFORGE_CACHE_DIR": str(ext_cache),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_DATA_HOME": str(tmp_path / "data"),
            "TERM": "xterm-256color",
            "CUDAFORGE_NO_ANIMATION": "1",
            "PATH": os.environ.get("PATH", ""),
            "CUDAFORGE_KEEP_SERVER_S": os.environ.get("CUDAFORGE_KEEP_SERVER_S", "0"),  # tests/conftest.py
            "HOME": os.environ.get("HOME", str(tmp_path)),
        }
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        cli = f"env -i {exports} {shlex.quote(sys.executable)} -m tui.cli"
        # the first exit code also goes to a file: the browser that starts next covers the shell's line,
        # on a quiet machine before a screen capture can see it
        exits = tmp_path / "exits.txt"
        command = (
            f"cd {shlex.quote(str(project))} && {cli} new relu.py; echo EXITED-NEW $? | tee -a {shlex.quote(str(exits))}; "
            f"{cli}; echo EXITED-BROWSER $?; sleep 60"
        )
        term = Terminal(f"cf-journey-{os.getpid()}-{size[0]}", size, tmp_path / "screens.txt")
        term.start(command)
        started = time.monotonic()
        try:
            journey(term, wide)
        finally:
            term.close()
            print(f"journey at {size[0]}x{size[1]}: {time.monotonic() - started:.0f} s")

    (session_dir,) = [p.parent for p in sessions.glob("*/HEAD")]
    with SessionRepo.open(session_dir) as repo:
        main = [(it.number, it.phase) for it in repo.history("main")]
        branch = [(it.number, it.phase) for it in repo.history("from-iter-2")]
        assert main == [(0, "seed"), (1, "optimize"), (2, "optimize"), (3, "human")]
        assert branch[:3] == main[:3] and branch[3] == (3, "optimize")  # the resumed round, committed once
        assert repo.history("from-iter-2")[2].sha == repo.history("main")[2].sha
        edited = repo.history("main")[2].suggestion
        assert edited["approved_by"] == "human" and edited["edited"] is True
        assert [r["note"] for r in edited["rejected"]] == ["not this one"]
        assert repo.history("main")[3].kernel_source.startswith('# tuned by hand\n"""ReLU')


def journey(term: Terminal, wide: bool) -> None:
    # 1. a new session: nothing runs, and the status line says which key starts what
    screen = term.wait("new session", "your turn: press s for the Coder's seed #0, r for all rounds")
    assert "# no kernel yet" in screen and "no CUDA source" not in screen

    # 2. step the seed: the Coder writes it (the task is checked first), then s evaluates it
    term.keys("s")
    screen = term.wait("seed written", "your turn: press s to evaluate #0", "#0 seed · not committed yet")
    assert "⏳" not in status_line(screen)  # nothing runs while it waits for the human
    term.keys("s")
    screen = term.wait("seed evaluated", "your turn: press s to run the Judge on #0", "kernel · iter 0 (main)")

    # 3. run rounds; approve the first suggestion, reject the next with a note, edit the third
    term.keys("r")
    term.wait("first suggestion", "Judge suggestion · optimize · on iter 0", "IDEA 1")
    term.keys("a")
    term.wait("second suggestion", "on iter 1", "IDEA 2", seconds=120)
    term.keys("r")
    term.wait("rejecting", "type a note, enter reject")  # keys typed before the note box shows are lost
    term.type("not this one")
    term.keys("Enter")
    screen = term.wait(
        "after a reject", "2nd suggestion this round", "you rejected the last one", "not this one", "IDEA 3"
    )
    term.keys("e")
    term.wait("editing the suggestion", "ctrl+s approve edited text")
    term.type("keep it small ")
    term.keys("C-s")
    screen = term.wait("rounds done", "finished: target #2 reached · + adds rounds", "kernel · iter 2 (main)", seconds=120)

    # 4. edit the kernel by hand: the footer shows the editor's keys; saving says what happens next
    term.keys("e")
    screen = term.wait("editing", "EDITING", "Save edit", "Cancel edit")
    term.keys("C-Home")
    term.type("# tuned by hand")
    term.keys("Enter", "C-s")
    term.wait("edit saved", "your turn: press s to evaluate your edit as #3 (human)", "Edit saved: it becomes #3 (human)")
    term.keys("s")
    # the timeline's new row may be drawn a frame after the title: waited for, not read from one snapshot
    human = ("#3 human",) if wide else ()
    screen = term.wait("edit evaluated", "kernel · iter 3 (main)", "finished: target #2 reached", *human, seconds=120)

    # 5. branch at #2: the loop moves to the branch, drawn as a child of main
    term.keys("p")
    term.wait("at #2", "kernel · iter 2 (main)")
    term.keys("b")
    term.wait("branched", "Now on branch from-iter-2", "kernel · iter 2 (from-iter-2)")
    rows = timeline(term, wide)
    assert rows[0].startswith("▼ main"), rows
    first_branch = next(k for k, row in enumerate(rows) if "from-iter-2" in row)
    numbers = [re.search(r"#(\d+)", row).group(1) for row in rows[1:first_branch]]
    assert numbers == ["0", "1", "2", "3"], rows  # main in full, above its offshoot
    assert rows[first_branch].startswith(("└── ▼ from-iter-2 (from #2)", "├── ▼ from-iter-2 (from #2)")), rows

    # 6. add rounds on the branch (the prompt's default, 3): r now has rounds to run
    term.keys("+")
    term.wait("add rounds", "Rounds to add to branch from-iter-2")
    term.keys("Enter")
    term.wait("rounds added", "now runs to #5", "your turn: press s to run the Judge on #2")

    # 7. quit while #3 of the branch builds: q lets the build finish and be committed, says so, then quits
    # (the words while it waits are asserted, at a held boundary, by tests/test_interrupt_tui.py)
    term.keys("r")
    term.wait("branch suggestion", "Judge suggestion", "on iter 2")
    term.keys("a")
    term.wait("building", "⏳ evaluating #3", seconds=60)
    term.keys("q")
    exits = term.log.parent / "exits.txt"  # the test's tmp_path, beside the screens' log
    assert until(lambda: exits.is_file() and "EXITED-NEW" in exits.read_text(), seconds=60), term.screen()
    assert exits.read_text().split() == ["EXITED-NEW", "0"]

    # 8. reopen from the browser: open, back with Escape, open again (issue #23.3)
    term.wait("browser", "1 session in", "relu")
    for attempt in (1, 2):
        term.keys("o")
        screen = term.wait(f"opened {attempt}", "kernel · iter")
        assert "read-only" not in " ".join(screen.split()).replace("python · read-only", ""), screen
        assert "being written" not in screen and "could not start" not in screen, screen
        term.keys("Escape")  # live: it asks first
        term.wait(f"leave {attempt}?", "Leave the live session", "y leave")
        term.keys("y")
        term.wait(f"back {attempt}", "1 session in")

    # 9. resume: the interrupted round goes on (its stored target, #5) and the Judge reads #3
    term.keys("o")
    term.wait("resumed", "kernel · iter")
    term.keys("r")
    term.wait("resumed round", "Judge suggestion", "on iter 3", seconds=120)
    term.keys("Escape")  # decide later
    term.wait("decide later", "your turn: approve, edit or reject the suggestion")
    term.keys("Escape")
    term.wait("leave?", "Leave the live session")
    term.keys("y")
    term.wait("back to the browser", "1 session in")

    # 10. replay it, read-only, step by step
    term.keys("r")
    # the status line is drawn a moment after the title: wait for both (at 80 columns the mode is cut off)
    screen = term.wait("replay", "kernel · iter 0 (from-iter-2)", *(["replay 1/4"] if wide else []))
    assert "replay 1/4" in status_line(screen) or not wide
    term.keys("n")
    term.wait("replay next", "kernel · iter 1 (from-iter-2)")
    term.keys("q")
    term.wait("done", "EXITED-BROWSER 0")
