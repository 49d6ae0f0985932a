"""Where a test run's CPU goes, by kind of process: run a command and sample /proc while it runs.

Why: the suite's wall time on CI's two cores is set by CPU work, and the shell's ``time`` cannot say
whose, since the evaluator's workers and compilers run below bwrap in sessions of their own and are
not all counted as the command's children. Sampling every process's CPU time (utime + stime) by
command line, keeping each process's last value, adds them up whoever reaps them; processes that
live shorter than one sampling interval are missed.

    python benchmarks/suite_cpu.py -- python -m pytest -n 3 -q -p no:cacheprovider

prints the command's wall time, how busy the machine's CPUs were meanwhile, and CPU seconds by kind.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")

#: substrings of a command line, first match wins, and the kind they are counted as
KINDS = (
    ("cc1plus", "C++ compiler (cc1plus)"),
    ("cicc", "nvcc toolchain"),
    ("ptxas", "nvcc toolchain"),
    ("nvcc", "nvcc toolchain"),
    ("collect2", "linker"),
    ("/ld ", "linker"),
    ("engine.eval.worker", "evaluation worker"),
    ("engine.eval.zygote", "fork server and its forked workers"),
    ("exec(eval(sys.stdin.readline()))", "pytest-xdist worker"),
    ("ray", "ray"),
    ("tmux", "tmux"),
    ("tui.cli", "cudaforge CLI"),
    ("engine.cli", "cudaforge CLI"),
    ("git", "git"),
    ("bwrap", "bwrap"),
    ("python", "other Python"),
)


def kind_of(command: str) -> str:
    for needle, kind in KINDS:
        if needle in command:
            return kind
    return "other" if command else "unnamed (exited or not yet exec'd when seen)"


def _busy_ticks() -> tuple[int, int]:
    """All CPUs' (busy, total) ticks since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class Sampler:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.seen: dict[tuple[int, int], list[object]] = {}  # (pid, start tick) -> [cpu seconds, command]
        self.stop = threading.Event()
        self.me = os.getpid()

    def sample(self) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.me:
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / HZ
                key = (int(entry), int(fields[19]))
                record = self.seen.setdefault(key, [0.0, ""])
                record[0] = cpu
                if not record[1]:
                    raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                    record[1] = raw.replace(b"\0", b" ").decode(errors="replace")[:300]
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.interval_s)
        self.sample()

    def by_kind(self, before: set[tuple[int, int]]) -> collections.Counter[str]:
        totals: collections.Counter[str] = collections.Counter()
        for key, (cpu, command) in self.seen.items():
            if key not in before:  # what ran already (this shell, the machine's services) is not the command's
                totals[kind_of(str(command))] += float(cpu)  # type: ignore[arg-type]
        return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    sampler = Sampler(args.interval)
    sampler.sample()
    before = set(sampler.seen)
    busy0, total0 = _busy_ticks()
    started = time.monotonic()
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    code = subprocess.call(command)
    wall = time.monotonic() - started
    sampler.stop.set()
    thread.join()
    busy1, total1 = _busy_ticks()
    totals = sampler.by_kind(before)
    print(f"\nsuite_cpu: exit {code} · wall {wall:.0f} s · CPUs busy {100 * (busy1 - busy0) / max(1, total1 - total0):.0f}%"
          f" of {os.cpu_count()} · {sum(totals.values()):.0f} CPU-s seen")  # fmt: skip
    for kind, seconds in totals.most_common():
        print(f"{seconds:9.1f} s  {kind}")
    return code


if __name__ == "__main__":
    sys.exit(main())
