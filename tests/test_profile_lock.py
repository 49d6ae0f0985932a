"""The per-GPU profiling lock, exercised with real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.profile.lock import gpu_profile_lock, lock_path

REPO = Path(__file__).resolve().parent.parent

HOLDER = """
import sys, time
from pathlib import Path
from engine.profile.lock import gpu_profile_lock
lock_dir, gpu, hold, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
out.with_suffix(".asked").write_text(str(time.time()))
with gpu_profile_lock(gpu, lock_dir=lock_dir):
    start = time.time()
    out.with_suffix(".ready").write_text("1")
    time.sleep(hold)
    end = time.time()
out.write_text(f"{start} {end}")
"""


def spawn_holder(lock_dir: Path, gpu: str, hold: float, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), gpu, str(hold), str(out)], cwd=REPO)


def wait_for(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def interval(path: Path) -> tuple[float, float]:
    start, end = path.read_text().split()
    return float(start), float(end)


def test_two_processes_on_one_gpu_take_turns(tmp_path: Path) -> None:
    a = spawn_holder(tmp_path, "0", 1.5, tmp_path / "a.txt")
    wait_for(tmp_path / "a.ready")  # A holds the lock; B asks for it while A still holds it
    b = spawn_holder(tmp_path, "0", 0.1, tmp_path / "b.txt")
    assert a.wait(30) == 0 and b.wait(30) == 0
    (a0, a1), (b0, b1) = interval(tmp_path / "a.txt"), interval(tmp_path / "b.txt")
    b_asked = float((tmp_path / "b.asked").read_text())
    assert b_asked < a1, "B must have asked while A still held the lock, or the test proves nothing"
    assert b0 >= a1, f"B got the lock while A held it: a={a0:.3f}-{a1:.3f} b={b0:.3f}-{b1:.3f}"


def test_different_gpus_do_not_block_each_other(tmp_path: Path) -> None:
    a = spawn_holder(tmp_path, "0", 3.0, tmp_path / "a.txt")
    wait_for(tmp_path / "a.ready")
    b = spawn_holder(tmp_path, "1", 0.1, tmp_path / "b.txt")
    assert b.wait(30) == 0 and a.wait(30) == 0
    (a0, a1), (b0, b1) = interval(tmp_path / "a.txt"), interval(tmp_path / "b.txt")
    assert a0 < b0 and b1 < a1, "the lock on GPU 1 should be taken while GPU 0's is held"


def test_timeout_while_another_process_holds_it_then_success(tmp_path: Path) -> None:
    uuid = "GPU-5b2f0c1e-aaaa-bbbb-cccc-0123456789ab"
    holder = spawn_holder(tmp_path, uuid, 1.5, tmp_path / "h.txt")
    wait_for(tmp_path / "h.ready")
    with (
        pytest.raises(TimeoutError, match="being profiled"),
        gpu_profile_lock(uuid, lock_dir=tmp_path, timeout_s=0.2),
    ):
        pass
    assert holder.wait(30) == 0
    with gpu_profile_lock(uuid, lock_dir=tmp_path, timeout_s=0.2) as path:
        assert path == lock_path(uuid, tmp_path) and path.parent == tmp_path


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    holder = spawn_holder(tmp_path, "3", 60, tmp_path / "h.txt")
    wait_for(tmp_path / "h.ready")
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    with gpu_profile_lock(3, lock_dir=tmp_path, timeout_s=60):  # taken at all: a held lock would time out
        assert holder.poll() is not None
