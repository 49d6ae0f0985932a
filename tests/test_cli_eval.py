"""``cudaforge eval`` and ``cudaforge doctor`` through the real entry point, in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.eval import stagetimes
from tests.conftest import EXAMPLES, python_path

TASK = EXAMPLES / "tasks" / "relu.py"
KERNEL = EXAMPLES / "kernels" / "relu_cpu.py"


def cudaforge(
    *args: str, cache: Path | None = None, extra_env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": python_path(), **(extra_env or {})}
    if cache is not None:
        env["CUDAFORGE_CACHE_DIR"] = str(cache)
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, env=env, timeout=600, cwd=cwd
    )


@pytest.mark.slow
def test_correct_kernel_exits_0_and_json_is_the_eval_result(ext_cache: Path) -> None:
    done = cudaforge(
        "eval", str(TASK), str(KERNEL), "--device", "cpu", "--timing-trials", "10", "--json", cache=ext_cache
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "correct" and result["speedup"] > 0
    readable = cudaforge("eval", str(TASK), str(KERNEL), "--device", "cpu", "--no-timing", cache=ext_cache)
    assert readable.returncode == 0
    assert "CORRECT" in readable.stdout and "5/5 trials passed" in readable.stdout
    # where the time went: the worker's stages, and what the evaluating process spent around them
    durations = result["durations"]
    stages = sum(durations.get(k, 0.0) for k in ("process_start", "setup", "reference", "build", "check", "time"))
    assert durations["evaluate"] >= stages > 0
    [line] = [x for x in readable.stdout.splitlines() if x.strip().startswith("stages ")]
    # the stages that took 0.05 s or more, by name, in their order (a quick check is left out: on a fast
    # machine it took less), what no stage explains last
    shown = [part.strip().rsplit(" ", 1)[0] for part in line.strip().removeprefix("stages").removesuffix(" s").split(" · ")]
    order = [name for name, _ in stagetimes.STAGES] + [stagetimes.AFTER, "outside"]
    assert shown[0] == "start" and shown == sorted(shown, key=order.index) and line.rstrip().endswith(" s"), line


@pytest.mark.slow
def test_the_eval_command_never_imports_torch_itself_and_the_worker_reports_a_broken_task(
    ext_cache: Path, tmp_path: Path
) -> None:
    """Importing torch took 2-3 s of every one-shot evaluation in the parent; the worker does it anyway."""
    code = (
        "import sys; from tui import cli; code = cli.main(sys.argv[1:]); "
        "print('TORCH', 'torch' in sys.modules, file=sys.stderr); sys.exit(code)"
    )
    env = {**os.environ, "PYTHONPATH": python_path(), "CUDAFORGE_CACHE_DIR": str(ext_cache)}
    run = lambda *a: subprocess.run([sys.executable, "-c", code, *a], capture_output=True, text=True, env=env, timeout=600)  # noqa: E731
    done = run("eval", str(TASK), str(KERNEL), "--no-timing")  # device from the config: auto
    assert done.returncode == 0 and "TORCH False" in done.stderr, done.stderr
    broken = tmp_path / "task.py"  # statically sound, fails only when run
    broken.write_text(TASK.read_text().replace("import torch\n", "import torch\nimport no_such_module_here\n", 1))
    done = run("eval", str(broken), str(KERNEL), "--device", "cpu")
    assert done.returncode == 2 and "TORCH False" in done.stderr
    assert "REFERENCE failed" in done.stdout and "no_such_module_here" in done.stdout


@pytest.mark.slow
def test_eval_honours_the_project_config_and_flags_beat_it(ext_cache: Path, tmp_path: Path) -> None:
    """[eval] in ./cudaforge.toml sets what eval does unless a flag says otherwise (one resolution)."""
    (tmp_path / "cudaforge.toml").write_text('[eval]\ndevice = "cpu"\ntrials = 3\nseed = 7\n')
    xdg = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    done = cudaforge("eval", str(TASK), str(KERNEL), "--no-timing", "--json", cache=ext_cache, cwd=tmp_path, extra_env=xdg)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["device"], len(result["trials"]), result["settings"]["seed"]) == ("cpu", 3, 7)
    flagged = cudaforge(
        "eval", str(TASK), str(KERNEL), "--no-timing", "--trials", "2", "--json", cache=ext_cache, cwd=tmp_path, extra_env=xdg
    )
    assert len(json.loads(flagged.stdout)["trials"]) == 2
    (tmp_path / "cudaforge.toml").write_text("[eval]\ntrails = 3\n")
    typo = cudaforge("eval", str(TASK), str(KERNEL), cache=ext_cache, cwd=tmp_path, extra_env=xdg)
    assert typo.returncode == 2 and "did you mean 'trials'" in typo.stderr


@pytest.mark.slow
def test_incorrect_kernel_exits_1(ext_cache: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(KERNEL.read_text().replace("return ext.relu(x)", "return ext.leaky_relu_bug(x)"))
    done = cudaforge("eval", str(TASK), str(wrong), "--device", "cpu", "--no-timing", cache=ext_cache)
    assert done.returncode == 1
    assert "INCORRECT" in done.stdout and "mismatch at index" in done.stdout


def test_usage_errors_exit_2_and_name_the_problem(tmp_path: Path) -> None:
    missing = cudaforge("eval", str(tmp_path / "nope.py"), str(KERNEL), "--device", "cpu")
    assert missing.returncode == 2 and "no such task file" in missing.stderr
    broken = tmp_path / "task.py"
    broken.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_init_inputs():\n    return []\n"
    )
    done = cudaforge("eval", str(broken), str(KERNEL), "--device", "cpu")
    assert done.returncode == 2 and "get_inputs" in done.stderr
    assert cudaforge("eval", str(TASK), str(KERNEL), "--trials", "0").returncode == 2


def test_doctor_reports_keys_as_set_never_their_values() -> None:
    secret = "sk-test-doctor-0123456789abcdef"
    done = cudaforge("doctor", extra_env={"OPENAI_API_KEY": secret})
    assert done.returncode == 0
    assert "torch" in done.stdout and "OPENAI_API_KEY" in done.stdout
    assert secret not in done.stdout + done.stderr
    as_json = json.loads(cudaforge("doctor", "--json", extra_env={"OPENAI_API_KEY": secret}).stdout)
    assert {c["name"]: c["detail"] for c in as_json}["OPENAI_API_KEY"] == "set"
    assert "workers" in {c["name"] for c in as_json}  # how evaluation workers start here
