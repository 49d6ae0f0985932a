"""The policy and the CPU own-kernel share recorded by a real CPU evaluation (C++ extension)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate_files
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from engine.guard.policy import GuardPolicyError, GuardSettings
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_cpu_eval_records_policy_refusals_and_the_extension_share(ext_cache: Path) -> None:
    options = EvalOptions(
        device="cpu",
        cache_root=ext_cache,
        timing=TimingPlan(min_trials=5, budget_s=2.0),
        guard=GuardSettings("strict", refuse=("timing-access",)),
    )
    result = evaluate_files(EXAMPLES / "tasks" / "relu.py", EXAMPLES / "kernels" / "relu_cpu.py", options)
    assert result.status == "correct", result.messages
    assert result.guard_policy == "strict" and result.guard_refuse == ["timing-access"]
    assert result.settings["guard_policy"] == "strict"
    share = result.kernel_share
    assert share is not None and share["method"] == "cpu-extension-wall"
    assert 0.0 < share["share"] <= 1.0 and share["own_ms"] > 0
    assert [k for k in share["kernels"] if k["own"]]
    assert share["kernels"] == sorted(share["kernels"], key=lambda k: -k["ms"])


def test_unknown_refuse_id_never_reaches_an_evaluation() -> None:
    """Refused when the run's one GuardSettings is made, naming the valid ids (a front end says so as a
    usage error); the options carry only such a settings object, so no evaluation checks ids again."""
    with pytest.raises(GuardPolicyError, match="valid rule ids"):
        GuardSettings(refuse=("nope",))


def test_eval_cli_prints_the_guard_line_and_records_it_in_json(ext_cache: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "c"),
    }
    args = [
        sys.executable,
        "-m",
        "tui.cli",
        "eval",
        str(EXAMPLES / "tasks" / "relu.py"),
        str(EXAMPLES / "kernels" / "relu_cpu.py"),
        "--device",
        "cpu",
        "--timing-trials",
        "5",
        "--guard",
        "strict",
        "--relax",
        "timing-access",
    ]
    env["CUDAFORGE_CACHE_DIR"] = str(ext_cache)
    text = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert text.returncode == 0, text.stderr
    assert "guard strict · relax timing-access" in text.stdout
    data = json.loads(
        subprocess.run(
            [*args, "--json"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
        ).stdout
    )
    assert data["guard_policy"] == "strict" and data["relaxed_rules"] == ["timing-access"]
    assert data["kernel_share"]["method"] == "cpu-extension-wall"
