"""Is ncu usable here, and why did a run fail: classification, discovery, counter permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine.profile.availability import (
    PERMISSION_DOC,
    check_profiling_available,
    classify_ncu_failure,
    counters_permission_status,
    find_ncu,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ncu"

PERMISSION_TEXT = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
    "the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


def fake_executable(directory: Path, name: str = "ncu") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_permission_error_in_either_stream(stream: str) -> None:
    kwargs = {"stdout": "", "stderr": ""}
    kwargs[stream] = PERMISSION_TEXT
    result = classify_ncu_failure(1, **kwargs)
    assert result is not None and result.reason == "no-permission"
    assert (
        "NVreg_RestrictProfilingToAdminUsers=0" in result.how_to_fix and PERMISSION_DOC in result.how_to_fix
    )


def test_permission_error_fixture_even_with_exit_code_zero() -> None:
    result = classify_ncu_failure(0, (FIXTURES / "synthetic_err_permission.txt").read_text(), "")
    assert result is not None and result.reason == "no-permission"


def test_no_kernels_profiled_is_a_warning_with_exit_zero() -> None:
    result = classify_ncu_failure(0, (FIXTURES / "synthetic_no_kernels.txt").read_text(), "")
    assert result is not None and result.reason == "no-kernels-profiled"
    assert "kernel-name filter" in result.how_to_fix


def test_timeout_and_missing_executable_and_generic_error() -> None:
    assert classify_ncu_failure(-9, "", "", timed_out=True).reason == "timeout"
    assert classify_ncu_failure(124, "", "").reason == "timeout"
    missing = classify_ncu_failure(None, "", "ncu: [Errno 2] No such file or directory")
    assert missing.reason == "no-ncu" and "CUDA_HOME" in missing.how_to_fix
    assert classify_ncu_failure(127, "", "sh: 1: ncu: not found").reason == "no-ncu"
    err = classify_ncu_failure(
        1, "==PROF== Connected\n", "==ERROR== Failed to prepare kernel for profiling\nmore\n"
    )
    assert err.reason == "error" and "Failed to prepare kernel" in err.message and "code 1" in err.message


def test_success_is_none() -> None:
    ok = (FIXTURES / "synthetic_raw_default_set.csv").read_text()
    assert classify_ncu_failure(0, ok, "") is None


def test_find_ncu_with_a_path_that_has_no_ncu(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty)}
    assert find_ncu(env, default_dirs=(), install_globs=()) is None


def test_find_ncu_search_order(tmp_path: Path) -> None:
    on_path = fake_executable(tmp_path / "path")
    cuda_home = tmp_path / "cuda"
    in_cuda_home = fake_executable(cuda_home / "bin")
    fake_executable(tmp_path / "opt" / "2024.1.0")
    newest = fake_executable(tmp_path / "opt" / "2025.3.1")
    globs = (str(tmp_path / "opt" / "*" / "ncu"),)

    assert find_ncu({"PATH": str(on_path.parent), "CUDA_HOME": str(cuda_home)}, install_globs=globs) == str(
        on_path
    )
    assert find_ncu({"PATH": "", "CUDA_HOME": str(cuda_home)}, default_dirs=(), install_globs=globs) == str(
        in_cuda_home
    )
    assert find_ncu({"PATH": ""}, default_dirs=(), install_globs=globs) == str(newest)
    # A non-executable file named ncu is not a hit.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "ncu").write_text("not a program")
    assert find_ncu({"PATH": str(plain)}, default_dirs=(str(plain),), install_globs=()) is None


def test_find_ncu_orders_versions_numerically(tmp_path: Path) -> None:
    fake_executable(tmp_path / "2025.3.1")
    newest = fake_executable(tmp_path / "2025.10.0")
    assert find_ncu({"PATH": ""}, default_dirs=(), install_globs=(str(tmp_path / "*" / "ncu"),)) == str(
        newest
    )


def test_counters_permission_status_from_params_file() -> None:
    restricted = FIXTURES / "synthetic_proc_params_restricted.txt"
    status, detail = counters_permission_status(restricted, euid=1000)
    assert status == "restricted" and "RmProfilingAdminOnly: 1" in detail and "1000" in detail
    assert counters_permission_status(restricted, euid=0)[0] == "ok"
    assert counters_permission_status(FIXTURES / "synthetic_proc_params_open.txt", euid=1000)[0] == "ok"


def test_counters_permission_status_unknown(tmp_path: Path) -> None:
    status, detail = counters_permission_status(tmp_path / "missing", euid=1000)
    assert status == "unknown" and "cannot read" in detail
    other = tmp_path / "params"
    other.write_text("EnableMSI: 1\n")
    assert counters_permission_status(other, euid=1000)[0] == "unknown"


def test_check_profiling_available(tmp_path: Path) -> None:
    params = FIXTURES / "synthetic_proc_params_restricted.txt"
    ncu = fake_executable(tmp_path / "bin")
    path, why = check_profiling_available({"PATH": str(ncu.parent)}, params, euid=1000)
    assert path == str(ncu) and why is not None and why.reason == "no-permission"
    path, why = check_profiling_available({"PATH": str(ncu.parent)}, params, euid=0)
    assert path == str(ncu) and why is None
    path, why = check_profiling_available({"PATH": str(ncu.parent)}, tmp_path / "none", euid=1000)
    assert why is None  # unknown does not block: ncu itself will tell


@pytest.mark.skipif(
    os.path.exists("/usr/local/cuda/bin/ncu"), reason="this machine has ncu in a default place"
)
def test_machine_without_ncu_reports_no_ncu(tmp_path: Path) -> None:
    path, why = check_profiling_available({"PATH": str(tmp_path)})
    assert path is None and why.reason == "no-ncu" and "not on PATH" in why.message
