"""Landlock and CUDA (engine/sandbox/cudaprobe.py): a CUDA run is not handed to Landlock when CUDA cannot start under it.

No GPU here, so the probe's "driver" is a stand-in that needs a file outside the rules, as the real
driver needed something Landlock withheld on the H200; the confinement, the two real processes and
the decision are the product's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.sandbox import SandboxError, cudaprobe, prepare
from engine.sandbox.landlock import abi_version

pytestmark = pytest.mark.skipif(abi_version() < 1, reason="needs Landlock")


def stand_in(needed: Path) -> str:
    """Probe code that 'starts CUDA' only when it can read ``needed`` (outside the Landlock rules)."""
    return (
        "from engine.sandbox.landlock import apply_from_env\n"
        "apply_from_env()\n"
        "try:\n"
        f"    open({str(needed)!r}, 'rb').read(1); print('0 0 1')\n"
        "except OSError:\n"
        "    print('304 -1 0')\n"
    )


@pytest.fixture
def no_bwrap(tmp_path: Path) -> dict[str, str]:
    cudaprobe.forget()
    yield {"CUDAFORGE_BWRAP": str(tmp_path / "none"), "PATH": "/usr/bin:/bin", "PYTHONPATH": sys.path[0]}
    cudaprobe.forget()


def test_a_cuda_run_is_refused_when_landlock_stops_cuda(
    tmp_path: Path, no_bwrap: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    needed = Path.home() / f".cudaforge-probe-{tmp_path.name}"  # the home is outside the rules
    needed.write_text("driver state")
    try:
        monkeypatch.setattr(cudaprobe, "PROBE_CODE", stand_in(needed))
        with pytest.raises(SandboxError) as caught:
            prepare(
                "auto", ["true"], job_dir=tmp_path / "job", writable=[], parent_env=no_bwrap, device="cuda"
            )
        message = str(caught.value)
        assert "CUDA does not start under the Landlock sandbox" in message and "error 304" in message
        assert "auto picked Landlock" in message and "bubblewrap" in message and 'sandbox = "off"' in message
        with pytest.raises(SandboxError, match="sandbox = landlock"):
            prepare(
                "landlock",
                ["true"],
                job_dir=tmp_path / "j2",
                writable=[],
                parent_env=no_bwrap,
                device="cuda:0",
            )
        cpu = prepare(
            "auto", ["true"], job_dir=tmp_path / "j3", writable=[], parent_env=no_bwrap, device="cpu"
        )
        assert cpu.mechanism == "landlock"  # the CPU path is not probed and keeps its sandbox
    finally:
        needed.unlink()


def test_landlock_is_kept_when_cuda_starts_under_it_or_does_not_start_at_all(
    tmp_path: Path, no_bwrap: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cudaprobe, "PROBE_CODE", stand_in(Path(sys.executable)))  # readable under the rules
    launch = prepare(
        "auto", ["true"], job_dir=tmp_path / "a", writable=[], parent_env=no_bwrap, device="cuda"
    )
    assert launch.mechanism == "landlock"
    cudaprobe.forget()
    monkeypatch.setattr(cudaprobe, "PROBE_CODE", stand_in(tmp_path / "absent"))  # fails unconfined too
    launch = prepare(
        "auto", ["true"], job_dir=tmp_path / "b", writable=[], parent_env=no_bwrap, device="cuda"
    )
    assert launch.mechanism == "landlock"  # a machine without CUDA: the evaluation reports that itself


def _has_driver() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(
    _has_driver(), reason="this machine has a CUDA driver (tests/test_sandbox_gpu.py covers it)"
)
def test_the_real_probe_without_a_driver_library_leaves_landlock_alone(
    tmp_path: Path, no_bwrap: dict[str, str]
) -> None:
    launch = prepare(
        "landlock", ["true"], job_dir=tmp_path / "c", writable=[], parent_env=no_bwrap, device="cuda"
    )
    assert launch.mechanism == "landlock"
    assert list(cudaprobe._answers.values()) == [None]  # probed (no driver: nothing to refuse)


def test_doctor_says_cuda_runs_are_refused_under_landlock_here(
    tmp_path: Path, no_bwrap: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.sandbox.report import sandbox_status

    needed = Path.home() / f".cudaforge-probe-{tmp_path.name}"
    needed.write_text("driver state")
    try:
        monkeypatch.setattr(cudaprobe, "PROBE_CODE", stand_in(needed))
        state, detail, fix = sandbox_status("auto", no_bwrap)
        assert state == "missing" and "CUDA does not start under it" in detail and "bubblewrap" in fix
        cudaprobe.forget()
        monkeypatch.setattr(cudaprobe, "PROBE_CODE", stand_in(Path(sys.executable)))
        state, detail, _ = sandbox_status("auto", no_bwrap)
        assert state == "warn" and detail.startswith("landlock ABI") and "CUDA does not start" not in detail
    finally:
        needed.unlink()


def test_the_answer_is_kept_across_evaluations_with_their_own_job_folders(
    tmp_path: Path, no_bwrap: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cudaprobe, "PROBE_CODE", stand_in(Path(sys.executable)))
    runs: list[str] = []
    real_run = cudaprobe._run
    monkeypatch.setattr(cudaprobe, "_run", lambda env: runs.append("probe") or real_run(env))
    for job in ("one", "two", "three"):
        launch = prepare(
            "auto", ["true"], job_dir=tmp_path / job, writable=[], parent_env=no_bwrap, device="cuda"
        )
        assert launch.mechanism == "landlock"
    assert runs == ["probe", "probe"]  # unconfined and confined, once for the process
