"""Which pairs ``cudaforge evalset`` finds in its arguments, and that nothing is dropped silently.

Static only (no import, no build): the three input forms, KernelBench's naming, and the errors
for arguments that cannot be read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.evalset.pairs import EvalsetError, discover, parse_ids
from tests.conftest import REPO

FIXTURE_PAIRS = Path(__file__).resolve().parent / "fixtures" / "evalset" / "pairs"
TASK = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n"
KERNEL = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def skipped_reasons(found) -> dict[str, str]:
    return {Path(s.path).name: s.why for s in found.skipped}


def test_parse_ids_reads_kernelbench_and_leaderboard_names() -> None:
    assert parse_ids("level_1_problem_19_sample_0_kernel") == (1, 19, 0)
    assert parse_ids("level2_problem3") == (2, 3, None)
    assert parse_ids("l3_p42") == (3, 42, None)
    assert parse_ids("19_ReLU") == (None, 19, None)
    assert parse_ids("relu_small") == (None, None, None)


def test_pairs_folder_finds_every_pair_and_reports_half_pairs(tmp_path: Path) -> None:
    found = discover([FIXTURE_PAIRS])
    assert [p.name for p in found.pairs] == ["broken_build", "hangs", "ok", "wrong"]
    assert all(p.task.name == "task.py" and p.kernel.name == "kernel.py" for p in found.pairs)
    assert found.skipped == []

    single = discover([FIXTURE_PAIRS / "ok", FIXTURE_PAIRS / "wrong"])  # pair folders named one by one
    assert [(p.name, p.kernel) for p in single.pairs] == [
        ("ok", FIXTURE_PAIRS / "ok" / "kernel.py"),
        ("wrong", FIXTURE_PAIRS / "wrong" / "kernel.py"),
    ]

    folder = tmp_path / "set"
    write(folder / "a" / "task.py", TASK)
    write(folder / "a" / "kernel.py", KERNEL)
    write(folder / "no_kernel" / "task.py", TASK)
    write(folder / "no_task" / "kernel.py", KERNEL)
    (folder / "notes").mkdir()
    write(folder / "level_2_problem_7_sample_3" / "task.py", TASK)
    write(folder / "level_2_problem_7_sample_3" / "kernel.py", KERNEL)
    found = discover([folder])
    assert [p.name for p in found.pairs] == ["a", "level_2_problem_7_sample_3"]
    assert (found.pairs[1].level, found.pairs[1].problem_id, found.pairs[1].sample_id) == (2, 7, 3)
    reasons = skipped_reasons(found)
    assert reasons["no_kernel"] == "no kernel.py beside its task.py"
    assert reasons["no_task"] == "no task.py beside its kernel.py"
    assert reasons["notes"] == "neither task.py nor kernel.py in it"


def test_kernelbench_layout_matches_by_problem_id_and_by_file_name(tmp_path: Path) -> None:
    tasks = tmp_path / "KernelBench" / "level1"
    write(tasks / "19_ReLU.py", TASK)
    write(tasks / "20_LeakyReLU.py", TASK)
    write(tasks / "21_Sigmoid.py", TASK)
    write(tasks / "helpers.py", "X = 1\n")
    kernels = tmp_path / "runs" / "my_run"
    write(kernels / "level_1_problem_19_sample_0_kernel.py", KERNEL)
    write(kernels / "level_1_problem_19_sample_1_kernel.py", KERNEL)
    write(kernels / "20_LeakyReLU.py", KERNEL)  # the task's own file name
    write(kernels / "level_2_problem_19_sample_0_kernel.py", KERNEL)  # another level
    write(kernels / "level_1_problem_99_sample_0_kernel.py", KERNEL)  # no such task
    write(kernels / "broken_kernel.py", "class ModelNew(:\n")  # unparsable and no id: cannot be matched
    write(kernels / "level_1_problem_21_sample_0_kernel.py", "class ModelNew(:\n")  # syntax error: judged
    found = discover([tasks, kernels])
    by_name = {p.name: p for p in found.pairs}
    assert sorted(by_name) == [
        "level_1_problem_19_sample_0",
        "level_1_problem_19_sample_1",
        "level_1_problem_20_sample_0",
        "level_1_problem_21_sample_0",
    ]
    assert by_name["level_1_problem_19_sample_1"].task.name == "19_ReLU.py"
    assert by_name["level_1_problem_19_sample_1"].sample_id == 1
    assert by_name["level_1_problem_20_sample_0"].kernel.name == "20_LeakyReLU.py"
    assert {p.level for p in found.pairs} == {1}
    reasons = skipped_reasons(found)
    assert reasons["helpers.py"].startswith("not a KernelBench task")
    assert "a level 2 kernel" in reasons["level_2_problem_19_sample_0_kernel.py"]
    assert "no task with problem id 99" in reasons["level_1_problem_99_sample_0_kernel.py"]
    assert "no problem id in its name" in reasons["broken_kernel.py"]
    assert len(found.skipped) == 4


def test_kernelbench_tasks_without_a_kernel_are_listed(tmp_path: Path) -> None:
    tasks = tmp_path / "level3"
    for name in ("1_MLP.py", "2_Net.py"):
        write(tasks / name, TASK)
    write(tmp_path / "k" / "l3_p2_deepseek.py", KERNEL)  # the leaderboard's short naming
    found = discover([tasks, tmp_path / "k"])
    assert [p.name for p in found.pairs] == ["level_3_problem_2_sample_0"]
    assert skipped_reasons(found) == {"1_MLP.py": "no kernel for this task"}


def test_one_tasks_folder_may_hold_several_levels(tmp_path: Path) -> None:
    problems = tmp_path / "problems"  # the leaderboard's layout: l{L}_p{N}.py side by side
    for name in ("l1_p19.py", "l2_p19.py", "l3_p5.py"):
        write(problems / name, TASK)
    kernels = tmp_path / "k"
    write(kernels / "level_2_problem_19_sample_0_kernel.py", KERNEL)
    write(kernels / "level_1_problem_19_sample_4_kernel.py", KERNEL)
    write(kernels / "19_ambiguous.py", KERNEL)  # no level: problem 19 is in two levels
    write(kernels / "level_3_problem_19_sample_0_kernel.py", KERNEL)
    found = discover([problems, kernels])
    assert [(p.name, p.task.name) for p in found.pairs] == [
        ("level_1_problem_19_sample_4", "l1_p19.py"),
        ("level_2_problem_19_sample_0", "l2_p19.py"),
    ]
    reasons = skipped_reasons(found)
    assert "is in levels [1, 2]" in reasons["19_ambiguous.py"]
    assert "holds problem 19 at level 1, 2 only" in reasons["level_3_problem_19_sample_0_kernel.py"]
    assert reasons["l3_p5.py"] == "no kernel for this task"


def test_tsv_pairs_relative_paths_names_and_missing_files(tmp_path: Path) -> None:
    write(tmp_path / "t" / "relu.py", TASK)
    write(tmp_path / "k" / "level_1_problem_19_sample_2_kernel.py", KERNEL)
    write(tmp_path / "k" / "mine.py", KERNEL)
    tsv = write(
        tmp_path / "pairs.tsv",
        "task\tkernel\n"
        "# a comment\n"
        "t/relu.py\tk/level_1_problem_19_sample_2_kernel.py\n"
        f"{tmp_path / 't' / 'relu.py'}\tk/mine.py\tMy Pair\n"
        "t/relu.py\tk/gone.py\n"
        "\n",
    )
    found = discover([tsv])
    assert [(p.name, p.problem_id, p.sample_id) for p in found.pairs] == [
        ("level_1_problem_19_sample_2", 19, 2),
        ("my-pair", None, None),
    ]
    assert [(s.path, s.why) for s in found.skipped] == [
        (f"{tsv}:5", f"no such file: {tmp_path / 'k' / 'gone.py'}")
    ]


def test_clashing_names_get_suffixes_and_a_broken_task_is_not_blamed_on_the_kernel(tmp_path: Path) -> None:
    for folder in ("one", "two"):
        write(tmp_path / folder / "x" / "task.py", TASK)
        write(tmp_path / folder / "x" / "kernel.py", KERNEL)
    write(tmp_path / "two" / "y" / "task.py", "def get_inputs():\n    return []\n")
    write(tmp_path / "two" / "y" / "kernel.py", KERNEL)
    found = discover([tmp_path / "one", tmp_path / "two"])
    assert [p.name for p in found.pairs] == ["x", "x-2"]
    assert len(found.skipped) == 1 and "its task is broken" in found.skipped[0].why
    assert "Model" in found.skipped[0].why


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({}, "no such file or folder"),
        ({"empty/.keep": ""}, "nothing to judge"),
        ({"single.py": KERNEL}, "a single .py file"),
        ({"k/a_kernel.py": KERNEL}, "needs its KernelBench tasks folder before it"),
        ({"level1/1_A.py": TASK}, "needs a kernels folder after it"),
        ({"mixed/1_A.py": TASK, "mixed/1_A_new.py": KERNEL}, "mixes task files"),
        ({"bad.tsv": "only-one-column\n"}, "expected 'task<TAB>kernel'"),
        ({"nothing/readme.py": "X = 1\n"}, "none of its .py files"),
    ],
)
def test_bad_inputs_are_clear_errors(tmp_path: Path, layout: dict[str, str], message: str) -> None:
    for relative, text in layout.items():
        write(tmp_path / relative, text)
    argument = tmp_path / (next(iter(layout)).split("/")[0] if layout else "missing")
    with pytest.raises(EvalsetError, match=message):
        discover([argument])


def test_only_unmatched_inputs_is_an_error_that_lists_them(tmp_path: Path) -> None:
    write(tmp_path / "set" / "a" / "task.py", TASK)
    with pytest.raises(EvalsetError, match=r"no \(task, kernel\) pair[\s\S]*no kernel.py beside"):
        discover([tmp_path / "set"])


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    env_cmd = [sys.executable, "-m", "engine.cli.evalset"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*env_cmd, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        )  # fmt: skip

    missing = run(str(tmp_path / "nope"), "--out", str(tmp_path / "out"), "--device", "cpu")
    assert missing.returncode == 2 and "no such file or folder" in missing.stderr
    relax = run(
        str(FIXTURE_PAIRS), "--out", str(tmp_path / "out"), "--device", "cpu", "--relax", "no-such-rule"
    )
    assert relax.returncode == 2 and "unknown guard rule" in relax.stderr
    gpus = run(str(FIXTURE_PAIRS), "--out", str(tmp_path / "out"), "--device", "cpu", "--gpus", "0")
    assert gpus.returncode == 2 and "--gpus needs a CUDA device" in gpus.stderr
    assert not (tmp_path / "out").exists()


def test_cudaforge_cli_has_the_evalset_command() -> None:
    from engine.cli.evalset import evalset_command
    from tui.cli import build_parser

    args = build_parser().parse_args(
        ["evalset", "pairs", "--out", "o", "--gpus", "0,1", "--relax", "a", "--relax", "b"]
    )
    assert args.func is evalset_command and args.gpus == [0, 1] and args.relax == ["a", "b"]
