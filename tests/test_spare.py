"""A worker started before its evaluation (engine/eval/spare.py), on CPU with real workers.

It must serve one evaluation exactly as a worker started for it would (same sandbox, same verdict),
start with torch imported, never be shared, and go away when nobody will use it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from engine.eval import spare
from engine.eval.evaluate import evaluate, warm_worker
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from tests.conftest import EXAMPLES

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
PYBIND = (Path(__file__).resolve().parent / "fixtures" / "build" / "relu_pybind_only.py").read_text()


def _options(cache: Path, **overrides: object) -> EvalOptions:
    return EvalOptions(device="cpu", cache_root=cache, timing=TimingPlan(min_trials=5, budget_s=1.0), **overrides)  # type: ignore[arg-type]


def _cpu_ticks(root: int) -> tuple[int, bool]:
    """CPU time (clock ticks) used so far by process ``root`` and everything below it (the sandbox's
    process tree: bwrap, then the worker in its own session), and whether all of them sleep (state S or a
    zombie: not running, not waiting to run, not waiting on the disk)."""
    stats: dict[int, tuple[int, int, str]] = {}  # pid -> (parent, utime + stime, state)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), fields[0])
    tree, grew = {root}, True
    while grew:
        below = {pid for pid, (parent, _, _) in stats.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    mine = [stats[pid] for pid in tree if pid in stats]
    return sum(ticks for _, ticks, _ in mine), all(state in "SZ" for _, _, state in mine)


def _wait_until_idle(pid: int, quiet_s: float = 1.5, limit_s: float = 180.0) -> None:
    """Until the spare's processes have slept without using CPU for ``quiet_s``: its imports are done
    and it waits for its job (a fixed 4 s sleep was too short on a loaded 2-core CI machine)."""
    deadline = time.monotonic() + limit_s
    last, still_since = _cpu_ticks(pid)[0], time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now, asleep = _cpu_ticks(pid)
        if now != last or not asleep:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet_s:
            return
    raise AssertionError(f"the spare (pid {pid}) was still busy after {limit_s} s")


def test_a_spare_serves_one_evaluation_as_a_fresh_worker_would(ext_cache: Path) -> None:
    options = _options(ext_cache, workers="exec")  # against a worker that imports torch itself (no fork server)
    spare.discard_all()  # one an earlier test in this process warmed for these settings would serve this one
    cold = evaluate(TASK, PYBIND, options)
    assert cold.settings["worker"] == "cold"
    warm_worker(options)
    [waiting] = list(spare._SPARES.values())
    _wait_until_idle(waiting.worker.process.pid)  # the Coder writes; the spare imports torch meanwhile
    warm = evaluate(TASK, PYBIND, options)
    assert warm.settings["worker"] == "spare"
    assert (warm.status, warm.sandbox, warm.stage) == (cold.status, cold.sandbox, cold.stage) == ("correct", cold.sandbox, "done")
    assert [t.passed for t in warm.trials] == [t.passed for t in cold.trials]
    # torch was imported before the job came: the worker's start (up to its first word) and setup (torch
    # and the stages' modules, then the task) are a small part of the cold one's
    cold_start = cold.durations["process_start"] + cold.durations["setup"]
    warm_start = warm.durations["process_start"] + warm.durations["setup"]
    assert warm_start < cold_start / 2, (warm_start, cold_start)
    # served once: the next evaluation starts its own
    assert evaluate(TASK, PYBIND, options).settings["worker"] == "cold"


def test_a_spare_for_other_settings_is_not_taken_and_is_given_up(ext_cache: Path, tmp_path: Path) -> None:
    options = _options(ext_cache)
    warm_worker(options)
    [waiting] = list(spare._SPARES.values())
    other = _options(tmp_path / "elsewhere")  # another build cache: another sandbox
    warm_worker(other)
    assert waiting.worker.process.wait(timeout=10) is not None and not waiting.job_dir.exists()
    assert list(spare._SPARES) == [spare.spare_key(other, (tmp_path / "elsewhere").resolve())]
    spare.discard_all()
    assert spare._SPARES == {}


def test_a_spare_whose_evaluating_process_goes_away_exits(ext_cache: Path) -> None:
    options = _options(ext_cache)
    warm_worker(options)
    [waiting] = list(spare._SPARES.values())
    spare._SPARES.clear()
    assert waiting.worker.go_fd is not None
    os.close(waiting.worker.go_fd)  # its stdin closes, as when the process that started it dies
    waiting.worker.go_fd = None
    assert waiting.worker.process.wait(timeout=30) == 0
    waiting.discard()
