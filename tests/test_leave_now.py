"""Leaving at once (a second Ctrl-C) takes cudaforge's builds along (engine/procgroups.py, ARCHITECTURE.md §4).

A real headless run builds a real C++ extension whose compile spins in a constexpr loop for a minute or
more; two SIGINTs arrive while cc1plus runs. The evaluation's worker lives in a process group of its
own, so only an explicit kill ends the compiler: without it, cc1plus goes on long after cudaforge left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from tests.loop_helpers import EXAMPLES, SCRIPTED
from tests.test_loop_cli import command, env, project

SPIN = """
constexpr long cudaforge_spin() {
    long s = 0;
    for (long i = 0; i < 6000; ++i) for (long j = 0; j < 6000; ++j) s += (i ^ j) & 1;
    return s;
}
static_assert(cudaforge_spin() >= 0, "a compile that takes minutes");
"""


def _slow_kernel() -> str:
    source = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()
    source = source.replace("#include <torch/extension.h>\n", "#include <torch/extension.h>\n" + SPIN, 1)
    source = source.replace(
        'extra_cflags=["-O3"]', 'extra_cflags=["-O3", "-fconstexpr-ops-limit=1000000000000"]'
    )
    return source.replace("cf_relu_cpu", f"cf_spin_{uuid.uuid4().hex[:8]}")  # never in the build cache


def _descendants(root: int) -> dict[int, tuple[str, int]]:
    """Every live process under ``root``: pid → (command name, process group)."""
    table: dict[int, tuple[int, str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z":
                table[int(entry.name)] = (int(fields[1]), name, int(fields[2]))
    found, frontier = {}, {root}
    while frontier:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier and pid not in found}
        found.update({pid: (table[pid][1], table[pid][2]) for pid in children})
        frontier = children
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def test_a_second_ctrl_c_leaves_no_compiler_running_outside_a_pid_namespace(
    tmp_path: Path, ext_cache: Path
) -> None:
    coder = tmp_path / "coder"
    coder.mkdir()
    (coder / "01_seed.md").write_text(f"The kernel.\n\n```python\n{_slow_kernel()}```\n")
    cwd = project(tmp_path)
    # bwrap's pid namespace would end the build with its worker; without it (landlock, or off) only
    # cudaforge's own kill does
    (cwd / "cudaforge.toml").write_text((cwd / "cudaforge.toml").read_text() + 'sandbox = "off"\n')
    args = [*command(tmp_path, str(EXAMPLES / "tasks" / "relu.py"), "--auto-approve", "--rounds", "0",
                     "--device", "cpu", "--name", "spin"),
            "--coder", f"scripted/{coder}", "--judge", f"scripted/{SCRIPTED / 'steady' / 'judge'}"]  # fmt: skip
    proc = subprocess.Popen(args, cwd=cwd, env=env(ext_cache, tmp_path), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    groups: set[int] = set()
    try:
        compiler = None
        for _ in range(1200):  # until the extension's compiler runs (bounded: 10 minutes at most)
            under = _descendants(proc.pid)
            compiler = next((pid for pid, (name, _) in under.items() if name == "cc1plus"), None)
            if compiler is not None or proc.poll() is not None:
                break
            time.sleep(0.5)
        assert compiler is not None, (
            proc.communicate()[0] if proc.poll() is not None else "no cc1plus started"
        )
        groups = {group for _, group in _descendants(proc.pid).values()} - {os.getpgid(0)}
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()
        proc.send_signal(signal.SIGINT)  # the first: stop after the stage in flight, which says so
        for _ in range(240):
            if any("Ctrl-C again to leave now" in line for line in list(lines)):
                break
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # the second: leave now
        proc.wait(timeout=120)
        reader.join(timeout=30)
        out = "".join(lines)
        assert proc.returncode == 130, out
        for _ in range(40):  # SIGKILL is delivered at once; give the kernel a moment to reap (20 s at most)
            if not _alive(compiler):
                break
            time.sleep(0.5)
        assert not _alive(compiler), f"cc1plus {compiler} still compiling after cudaforge left:\n{out}"
    finally:
        for group in groups:  # whatever the outcome, nothing of this test outlives it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_a_tree_whose_top_leads_no_group_is_killed_top_included() -> None:
    # a kept fork server under bwrap is not its group's leader (bwrap's session is): a kill of the group
    # alone missed it, and it outlived the run that meant to end it
    from engine.procgroups import kill_tree

    mark = f"{os.getpid() % 1000 + 3000}.{uuid.uuid4().int % 100000}"
    top = subprocess.Popen(["sh", "-c", f"sleep {mark} & wait"], start_new_session=False)  # in the test's own group
    try:
        assert _until(lambda: bool(subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True).stdout))
        kill_tree(top.pid)
        assert top.wait(timeout=60) == -signal.SIGKILL
        assert _until(lambda: not subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True).stdout)
    finally:
        subprocess.run(["pkill", "-9", "-f", f"sleep {mark}"], capture_output=True)


def _until(condition) -> bool:  # noqa: ANN001
    from tests.conftest import until

    return until(condition, 60)
