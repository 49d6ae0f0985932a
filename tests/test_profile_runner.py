"""profile_with_ncu end to end with a stand-in `ncu` executable (this machine has no GPU and no ncu).

The stand-in is a real program run as a real subprocess: it runs the profiled script for real and prints
what ncu prints in each situation (the synthetic fixtures), so the runner's process handling, lock,
timeouts, report import and parsing are all exercised.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from engine.profile.lock import gpu_profile_lock
from engine.profile.result import ProfileResult
from engine.profile.runner import profile_with_ncu
from engine.profile.specs import lookup

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"

FAKE_NCU = f"""#!{sys.executable}
import os, subprocess, sys, time
from pathlib import Path
fixtures = Path({str(FIXTURES)!r})
argv = sys.argv[1:]
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if "-i" in argv:
    page = argv[argv.index("--page") + 1]
    name = "synthetic_raw_default_set.csv" if page == "raw" else "synthetic_details.csv"
    sys.stdout.write((fixtures / name).read_text())
    sys.exit(0)
Path(os.environ["FAKE_NCU_ARGV"]).write_text("\\n".join(argv))
if mode == "permission":
    sys.stdout.write((fixtures / "synthetic_err_permission.txt").read_text())
    sys.exit(1)
if mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path(os.environ["FAKE_NCU_CHILD"]).write_text(str(child.pid))
    time.sleep(60)
target = argv[argv.index({sys.executable!r}):]
print("==PROF== Connected to process 4242")
subprocess.run(target, check=True)
if mode == "nokernels":
    sys.stdout.write((fixtures / "synthetic_no_kernels.txt").read_text())
    sys.exit(0)
Path(argv[argv.index("-o") + 1]).write_bytes(b"fake report")
print("==PROF== Disconnected from process 4242")
"""

WORKER = """
import sys
from pathlib import Path
Path(sys.argv[1]).write_text("forward ran")
print("candidate built")
"""


@pytest.fixture
def fake_ncu(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def env_for(tmp_path: Path, mode: str, fake_ncu: Path | None) -> dict[str, str]:
    path_dirs = [str(fake_ncu.parent)] if fake_ncu else []
    return {
        **os.environ,
        "PATH": os.pathsep.join(path_dirs + ["/usr/bin", "/bin"]),
        "FAKE_NCU_MODE": mode,
        "FAKE_NCU_ARGV": str(tmp_path / "argv.txt"),
        "FAKE_NCU_CHILD": str(tmp_path / "child.pid"),
    }


def run(tmp_path: Path, mode: str, fake_ncu: Path | None, **kwargs) -> ProfileResult:
    (tmp_path / "worker.py").write_text(WORKER)
    kwargs.setdefault("lock_dir", tmp_path / "locks")
    return profile_with_ncu(
        [str(tmp_path / "worker.py"), str(tmp_path / "ran.txt")],
        workdir=tmp_path / "work",
        kernel_names=["add_kernel", "sgemm_tiled"],
        clock_control="none",
        python=sys.executable,
        env=env_for(tmp_path, mode, fake_ncu),
        **kwargs,
    )


def test_success_end_to_end(tmp_path: Path, fake_ncu: Path) -> None:
    result = run(tmp_path, "ok", fake_ncu, spec=lookup("NVIDIA H200"), duration_ms=0.52, nvtx_range="judge")
    assert result.kind == "ncu" and result.unavailable is None
    assert (tmp_path / "ran.txt").read_text() == "forward ran"  # the profiled script really ran
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv[argv.index("-k") + 1] == "regex:^(add_kernel|sgemm_tiled)$"
    assert argv[argv.index("--nvtx-include") + 1] == "judge/"
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert result.command[0] == str(fake_ncu)
    assert set(result.metrics) == {"add_kernel", "sgemm_tiled"} and result.launches == {
        "add_kernel": 2,
        "sgemm_tiled": 1,
    }
    assert {r.rule for r in result.rules} >= {"CPIStall", "TheoreticalOccupancy"}
    assert (
        result.summary is not None
        and "compute-bound" in result.summary.text
        and "memory-bound" in result.summary.text
    )
    assert (tmp_path / "work" / "ncu.log").exists() and result.duration_s is not None
    again = ProfileResult.from_json(result.to_json())
    assert again.to_dict() == json.loads(result.to_json())
    assert again.metrics["add_kernel"]["dram__bytes.sum"] == (201_326_592, "byte")


def test_simulated_permission_error(tmp_path: Path, fake_ncu: Path) -> None:
    result = run(tmp_path, "permission", fake_ncu)
    assert result.kind == "none" and result.unavailable.reason == "no-permission"
    assert "NVreg_RestrictProfilingToAdminUsers=0" in result.unavailable.how_to_fix
    assert "ERR_NVGPUCTRPERM" in (tmp_path / "work" / "ncu.log").read_text()


def test_no_kernels_profiled(tmp_path: Path, fake_ncu: Path) -> None:
    result = run(tmp_path, "nokernels", fake_ncu)
    assert result.kind == "none" and result.unavailable.reason == "no-kernels-profiled"


@pytest.mark.skipif(
    os.path.exists("/usr/local/cuda/bin/ncu"), reason="this machine has ncu in a default place"
)
def test_machine_without_ncu(tmp_path: Path) -> None:
    result = run(tmp_path, "ok", None)
    assert result.kind == "none" and result.unavailable.reason == "no-ncu"
    assert "CUDA_HOME" in result.unavailable.how_to_fix and not (tmp_path / "ran.txt").exists()
    assert ProfileResult.from_json(result.to_json()).unavailable == result.unavailable


def test_timeout_kills_ncu_and_its_children(tmp_path: Path, fake_ncu: Path) -> None:
    result = run(tmp_path, "hang", fake_ncu, timeout_s=2.0)  # the fake hangs for ever: only the timeout ends it
    assert result.kind == "none" and result.unavailable.reason == "timeout"
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while True:  # the grandchild was killed with the group (it may linger briefly as a zombie of init)
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        status = Path(f"/proc/{child}/stat")
        if status.exists() and status.read_text().split()[2] == "Z":
            break
        assert time.monotonic() < deadline, "the profiled worker outlived the timeout"
        time.sleep(0.05)


def test_gpu_busy_with_another_profile(tmp_path: Path, fake_ncu: Path) -> None:
    with gpu_profile_lock(0, lock_dir=tmp_path / "locks"):
        result = run(tmp_path, "ok", fake_ncu, lock_timeout_s=0.3)
    assert result.kind == "none" and result.unavailable.reason == "timeout"
    assert not (tmp_path / "ran.txt").exists()
