"""benchmarks/suite_cpu.py: a command's CPU by kind of process, counted whoever reaps the processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from benchmarks.suite_cpu import kind_of

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "suite_cpu.py"


def test_command_lines_are_counted_as_their_kind() -> None:
    assert kind_of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet main.cpp") == "C++ compiler (cc1plus)"
    assert kind_of("/venv/bin/python -m engine.eval.worker --spare /tmp/job.json") == "evaluation worker"
    assert kind_of("/venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))") == "pytest-xdist worker"
    assert kind_of("/venv/bin/python -m tui.cli new relu.py") == "cudaforge CLI"
    assert kind_of("") == "unnamed (exited or not yet exec'd when seen)"


def test_a_grandchild_that_spins_is_counted_with_the_wall_time_and_exit_code() -> None:
    # the spinning process is a grandchild in a session of its own, as the evaluator's workers are
    spin = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"
    grandchild = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {spin!r}], start_new_session=True) + 3)"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--interval", "0.1", "--", sys.executable, "-c", grandchild],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert re.search(r"suite_cpu: exit 3 · wall \d+ s · CPUs busy \d+% of \d+", done.stdout), done.stdout
    seconds = float(re.search(r"([\d.]+) s  other Python", done.stdout).group(1))  # type: ignore[union-attr]
    assert seconds > 0, done.stdout  # its CPU time is counted under "other Python" (how much is the clock's)
