"""``cudaforge profile``, ``extract`` and ``apply`` through the real entry point on a CPU: the user's model
from profile to a checked drop-in, a wrong kernel refused with the model untouched, bad input in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO, python_path

TINY = EXAMPLES / "models" / "tiny_mlp.py"
MODEL = [f"{TINY}:make_model", "--inputs", f"{TINY}:example_inputs", "--device", "cpu"]
GOOD = EXAMPLES / "models" / "kernels" / "block_cpu.py"
LINEAR = EXAMPLES / "models" / "kernels" / "linear_cpu.py"
STALE = REPO / "tests" / "fixtures" / "model" / "block_stale_cpu.py"


def cudaforge(*args: str, cache: Path | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": python_path()}
    if cache is not None:
        env["CUDAFORGE_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, env=env, timeout=900, cwd=cwd)


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model") / "tiny"
    # named by path: which modules are heaviest on a loaded CPU moves from run to run (the selection by
    # time has its own test with fixed times, tests/test_model_extract.py)
    done = cudaforge("extract", *MODEL, "--path", "blocks.0", "--path", "embed", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_profile_gives_each_module_path_its_share_calls_and_shapes(tmp_path: Path) -> None:
    done = cudaforge("profile", *MODEL, "--json", str(tmp_path / "profile.json"))
    assert done.returncode == 0, done.stderr
    profile = json.loads((tmp_path / "profile.json").read_text())
    modules = {m["path"]: m for m in profile["modules"]}
    assert set(modules) == {"", "embed", "blocks", "blocks.0", "blocks.0.fc1", "blocks.0.fc2", "blocks.1", "blocks.1.fc1", "blocks.1.fc2", "head"}
    assert modules[""]["share"]["total"] == pytest.approx(1.0)
    block = modules["blocks.0"]
    assert block["type"].endswith(".Block") and block["calls"] == 1 and block["args"][0]["shape"] == [256, 64]
    assert 0 < block["share"]["self"] < block["share"]["total"] < 1
    assert block["total_ms"] == pytest.approx(block["self_ms"] + modules["blocks.0.fc1"]["total_ms"] + modules["blocks.0.fc2"]["total_ms"])
    assert modules["blocks"]["calls"] == 0  # a ModuleList is never called
    assert modules["blocks.0.fc1"]["flops"] == 2 * 256 * 64 * 256
    assert profile["latency"]["median_ms"] > 0 and profile["device_ms"] > 0
    assert "Block" in done.stdout and "(model)" in done.stdout and "forward" in done.stdout
    assert "cudaforge profile: timing" in done.stderr  # progress while it works


def test_extract_writes_tasks_a_manifest_and_the_profile(extracted: Path) -> None:
    manifest = json.loads((extracted / "manifest.json").read_text())
    paths = {t["name"]: t["paths"] for t in manifest["tasks"]}
    assert paths == {"block": ["blocks.0", "blocks.1"], "linear": ["embed"]}
    assert sorted(p.name for p in (extracted / "tasks").iterdir()) == ["block.py", "linear.py"]
    assert (extracted / "profile.json").is_file()


def test_extract_refuses_a_folder_in_use_and_writes_nothing_when_the_model_fails(tmp_path: Path, extracted: Path) -> None:
    done = cudaforge("extract", *MODEL, "--out", str(extracted))
    assert done.returncode == 2 and "exists and is not an empty folder" in done.stderr
    broken = tmp_path / "broken.py"
    broken.write_text(TINY.read_text() + "\n\ndef bad_inputs():\n    return torch.randn(4, 7)\n")
    out = tmp_path / "out"
    done = cudaforge("extract", f"{broken}:make_model", "--inputs", f"{broken}:bad_inputs", "--device", "cpu", "--out", str(out))
    assert done.returncode == 2
    [line] = [x for x in done.stderr.splitlines() if x.startswith("cudaforge extract: the model")]
    assert "the model failed on its inputs: RuntimeError" in line and "broken.py:" in line
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["broken.py"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([f"{TINY}:nothing", "--input-shape", "4,32"], "defines no factory `nothing`"),
        ([*MODEL, "--dtype", "int4"], "--dtype 'int4' is not one of fp32, bf16, fp16"),
        ([f"{TINY}:make_model", "--input-shape", "4,32", "--device", "cuda"], "no CUDA GPU"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    if "cuda" in args:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    done = cudaforge("profile", *args)
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_model_larger_than_memory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    # 2**48 weights: more than any address space, so the allocator refuses at once whatever the overcommit
    huge = tmp_path / "huge.py"
    huge.write_text("import torch.nn as nn\n\ndef make():\n    return nn.Linear(1 << 24, 1 << 24)\n")
    done = cudaforge("profile", f"{huge}:make", "--input-shape", "2,16777216", "--device", "cpu")
    assert done.returncode == 2
    [line] = [x for x in done.stderr.splitlines() if not x.endswith("…")]
    assert line.startswith("cudaforge profile: the model does not fit on cpu: ")


def test_a_model_process_killed_by_a_signal_says_which_and_why_it_likely_was(tmp_path: Path) -> None:
    killer = tmp_path / "killer.py"
    killer.write_text("import os\nimport signal\n\ndef make():\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    done = cudaforge("profile", f"{killer}:make", "--input-shape", "2,4", "--device", "cpu")
    assert done.returncode == 2
    assert "the model process was killed by SIGKILL (on Linux most often the out-of-memory killer" in done.stderr


def session_with(kernel: Path, task: Path, root: Path) -> str:
    """A session of ``task`` whose iteration 0 is ``kernel``, judged correct (as the loop would commit it)."""
    from sessions.repo import SessionRepo

    with SessionRepo.create(root, task, name="block-session") as repo:
        repo.record_iteration(kernel_source=kernel.read_text(), eval_result={"status": "correct", "speedup": 0.5, "stage": "time"}, phase="seed")
    return "block-session"


def _precompiled_torch_header(cache: Path, extra_cflags: list[str]) -> dict[str, str]:
    """``CPATH`` naming the run's precompiled ``torch/extension.h`` for these flags (``python -m
    tests.make_headers`` makes it before the tests, as CI does), so the drop-in's own stock ``load_inline``
    builds, torch's and not cudaforge's, skip parsing torch's headers (about 50 s a kernel on a 2-core
    machine); g++ reads the header itself where none was made. The builds are otherwise the user's: same
    sources, flags and names."""
    from engine.eval.build.pch import HeaderStore, header_key

    store, key = HeaderStore(cache), header_key({"extra_cflags": extra_cflags}, False)
    return {"CPATH": str(store.folder(key))} if store.ready(key) else {}


@pytest.mark.slow
def test_apply_checks_times_and_exports_a_drop_in_that_keeps_the_weights(extracted: Path, ext_cache: Path, tmp_path: Path) -> None:
    export = tmp_path / "optimized.py"
    session = session_with(GOOD, extracted / "tasks" / "block.py", tmp_path / "sessions")
    done = cudaforge(
        "apply", *MODEL, "--kernel", f"linear={LINEAR}", "--tasks", str(extracted), "--from-session", session,
        "--sessions-dir", str(tmp_path / "sessions"), "--export", str(export), "--json", str(tmp_path / "apply.json"),
        "--timing-trials", "20", cache=ext_cache,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads((tmp_path / "apply.json").read_text())
    linear, block = report["kernels"]
    assert (linear["label"], linear["status"], linear["paths"]) == ("linear", "correct", ["embed"])
    assert (block["label"], block["status"], block["paths"]) == ("block-session#0", "correct", ["blocks.0", "blocks.1"])
    whole = report["whole"]
    assert whole["status"] == "correct" and whole["speedup"] > 0
    low, high = whole["interval"]
    assert low <= whole["speedup"] <= high
    assert whole["result"]["trials"] and all(t["passed"] for t in whole["result"]["trials"])
    assert "whole model: correct · end to end" in done.stdout and report["exported"] == str(export)
    # the drop-in, used the way a user would: another process, a fresh model, weights kept by name, and
    # torch.compile keeps each kernel as one custom op instead of breaking its graph there
    use = f"""
import sys, torch
sys.path.insert(0, {str(TINY.parent)!r})
import tiny_mlp, optimized
torch.manual_seed(3)
model = tiny_mlp.make_model().eval()
x = torch.randn(256, 32)
expected = model(x)
keys = sorted(model.state_dict())
optimized.optimize(model, verify=True)
assert sorted(model.state_dict()) == keys
assert type(model.blocks[0]).__name__ == type(model.embed).__name__ == "ModelNew"
with torch.no_grad():
    assert torch.allclose(model(x), expected, atol=1e-5)
    explained = torch._dynamo.explain(model)(x)
print("breaks", explained.graph_break_count)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), python_path()]), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    env.update(_precompiled_torch_header(ext_cache, ["-O3"]))
    used = subprocess.run([sys.executable, "-c", use], capture_output=True, text=True, env=env, timeout=600)
    assert used.returncode == 0, used.stderr
    assert "breaks 0" in used.stdout


@pytest.mark.slow
def test_a_kernel_right_on_its_task_but_wrong_in_the_model_is_refused_and_nothing_is_written(extracted: Path, ext_cache: Path, tmp_path: Path) -> None:
    before = TINY.read_bytes()
    export = tmp_path / "optimized.py"
    done = cudaforge(
        "apply", *MODEL, "--kernel", f"{extracted / 'tasks' / 'block.py'}={STALE}", "--export", str(export),
        "--timing-trials", "10", "--json", str(tmp_path / "apply.json"), cache=ext_cache,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr + done.stdout
    report = json.loads((tmp_path / "apply.json").read_text())
    assert report["kernels"][0]["status"] == "correct"  # its own task cannot tell
    assert report["broke"] == ["blocks.0", "blocks.1"] and report["exported"] is None
    assert "refused: the whole model with the kernels is runtime_error" in done.stdout
    assert "the swap of blocks.0, blocks.1 breaks it" in done.stdout and "nothing was exported" in done.stdout
    assert not export.exists() and TINY.read_bytes() == before


@pytest.mark.slow
def test_two_tasks_of_one_class_are_applied_together_each_with_its_own_constructor(ext_cache: Path, tmp_path: Path) -> None:
    model = REPO / "tests" / "fixtures" / "model" / "two_widths.py"
    spec = [f"{model}:make_model", "--inputs", f"{model}:example_inputs", "--device", "cpu"]
    done = cudaforge("extract", *spec, "--path", "narrow.0", "--path", "wide", "--out", str(tmp_path / "x"))
    assert done.returncode == 0, done.stderr
    tasks = {t["name"]: t["paths"] for t in json.loads((tmp_path / "x" / "manifest.json").read_text())["tasks"]}
    assert tasks == {"block": ["narrow.0", "narrow.1"], "block_2": ["wide"]}
    kernels = [a for name in tasks for a in ("--kernel", f"{tmp_path / 'x' / 'tasks' / (name + '.py')}={GOOD}")]
    done = cudaforge("apply", *spec, *kernels, "--timing-trials", "5", "--json", str(tmp_path / "apply.json"), cache=ext_cache)
    assert done.returncode == 0, done.stderr + done.stdout
    report = json.loads((tmp_path / "apply.json").read_text())
    assert [k["task"] for k in report["kernels"]] == ["block", "block_2"] and report["whole"]["status"] == "correct"


@pytest.mark.parametrize(("signum", "code", "said"), [(2, 130, "Ctrl-C"), (15, 143, "SIGTERM")])
def test_a_signal_stops_extract_with_one_line_and_writes_nothing(tmp_path: Path, signum: int, code: int, said: str) -> None:
    import signal

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": python_path()}
    process = subprocess.Popen(
        [sys.executable, "-m", "tui.cli", "extract", *MODEL, "--path", "blocks.0", "--out", str(out)],
        stderr=subprocess.PIPE, text=True, env=env,
        # as a background job of a script is started: SIGINT ignored (the command installs its own handlers)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert process.stderr is not None
    lines = []
    for line in process.stderr:  # the model process is at work: stop it there, as a person would
        lines.append(line)
        if "tracing the model's modules" in line:
            process.send_signal(signum)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=120) == code
    assert f"cudaforge extract: stopped ({said}); nothing was written" in rest and "Traceback" not in rest
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_task_that_cannot_run_in_the_sandbox_is_the_tasks_failure_not_the_kernels(ext_cache: Path, tmp_path: Path) -> None:
    """net.py imports its block class from layers.py beside it: the model process reads it, the evaluation's
    sandbox does not (the user's folders are hidden). That is said as the task's failure, exit 2, never
    as the kernel's refusal (exit 1)."""
    net = REPO / "tests" / "fixtures" / "model" / "sibling" / "net.py"
    spec = [f"{net}:make_model", "--inputs", f"{net}:example_inputs", "--device", "cpu"]
    done = cudaforge("extract", *spec, "--path", "0", "--out", str(tmp_path / "x"))
    assert done.returncode == 0, done.stderr
    assert "from layers import Block" in (tmp_path / "x" / "tasks" / "block.py").read_text()
    done = cudaforge("apply", *spec, "--kernel", f"{tmp_path / 'x' / 'tasks' / 'block.py'}={GOOD}", "--json", str(tmp_path / "a.json"), cache=ext_cache)
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["failed"] == "task" and report["whole"] is None
    assert "the task block was not judged (the task itself failed, in the evaluation's sandbox)" in report["failure"]
    assert "No module named 'layers'" in report["failure"]
