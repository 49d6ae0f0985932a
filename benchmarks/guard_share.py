"""Measure the own-kernel share (engine.guard.share) for honest partial kernels and trivial-but-present ones,
so that the ``own-kernel-trivial`` threshold (engine.guard.runtime.OWN_SHARE_MIN) is set from numbers.

Usage (on a CUDA machine; the corpus is optional and never copied into this repo):

    PYTHONPATH=$PWD python benchmarks/guard_share.py [--corpus /path/to/KernelBenchLeaderboard --corpus-n 20]
        [--pair TASK.py KERNEL.py LABEL]... [--device cuda]

Each pair is evaluated under the default policy with the share rule relaxed (so a trivial kernel is still
measured, not cut short) and one table row is printed: label, kind, status, speedup, share, own and library
ms per forward, the largest library kernel. The summary prints the largest share among the kernels that are
trivial by construction and the smallest among the honest ones: the threshold belongs between the two.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "guard"
TASKS = FIX / "tasks"
EXAMPLES = ROOT / "examples"

# (task, kernel, label, kind): kind "honest" (own kernels do real work) or "trivial" (present, no work)
BUILTIN: list[tuple[Path, Path, str, str]] = [
    (
        TASKS / "conv_relu_scale.py",
        FIX / "partial_conv_epilogue.py",
        "conv in cuDNN + fused epilogue",
        "honest",
    ),
    (
        TASKS / "conv_relu_scale.py",
        FIX / "trivial_own_kernel.py",
        "no-op own kernel, torch does all",
        "trivial",
    ),
    (
        EXAMPLES / "tasks" / "relu_large.py",
        EXAMPLES / "kernels" / "relu_cuda.py",
        "full replacement relu",
        "honest",
    ),
    (TASKS / "add_relu.py", FIX / "cheat_torch-compute-in-forward.py", "add kernel + torch.relu", "honest"),
    (TASKS / "add_relu.py", FIX / "cheat_submodule-compute-in-forward.py", "add kernel + nn.ReLU", "honest"),
    (TASKS / "add_gelu.py", FIX / "cheat_functional-in-forward.py", "add kernel + F.gelu", "honest"),
    (TASKS / "add_half.py", FIX / "cheat_tensor-arithmetic-in-forward.py", "add kernel + * 0.5", "honest"),
    (
        TASKS / "add_matmul.py",
        FIX / "cheat_torch-compute-in-extension.py",
        "add kernel + ATen matmul in C++",
        "honest",
    ),
]


def corpus_pairs(root: Path, n: int) -> list[tuple[Path, Path, str, str]]:
    """Honest partial kernels from the leaderboard: refused under strict only for PyTorch ops, built under default."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from guard_corpus import load_corpus, pick_spread, static_scan

    corpus = [e for e in load_corpus(root) if e["task"].is_file() and e["level"] in (2, 3)]
    scan = static_scan(corpus)
    partial = [e for e in corpus if scan[e["file"]]["strict"] and not scan[e["file"]]["default"]]
    return [
        (e["task"], e["kernel"], f"l{e['level']}_p{e['problem_id']} {e['file'][:8]}", "corpus")
        for e in pick_spread(partial, n)
    ]


def measure(task: Path, kernel: Path, device: str) -> Any:
    from engine.eval.evaluate import evaluate_files
    from engine.eval.options import EvalOptions
    from engine.eval.timing import TimingPlan
    from engine.guard.policy import GuardSettings

    options = EvalOptions(device=device, guard=GuardSettings(relax=("own-kernel-trivial",)), timing=TimingPlan(min_trials=30))
    return evaluate_files(task, kernel, options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--corpus-n", type=int, default=20)
    parser.add_argument("--pair", nargs=3, action="append", default=[], metavar=("TASK", "KERNEL", "LABEL"))
    args = parser.parse_args(argv)
    pairs = list(BUILTIN) + [(Path(t), Path(k), label, "given") for t, k, label in args.pair]
    if args.corpus:
        pairs += corpus_pairs(args.corpus, args.corpus_n)
    print("| kernel | kind | status | speedup | share | own ms | library ms | largest library kernel |")
    print("|---|---|---|---|---|---|---|---|")
    by_kind: dict[str, list[float]] = {}
    for task, kernel, label, kind in pairs:
        try:
            result = measure(task, kernel, args.device)
        except Exception as error:  # one broken pair must not end the table
            print(f"| {label} | {kind} | error: {error} | | | | | |")
            continue
        share = result.kernel_share or {}
        library = [k for k in share.get("kernels", []) if not k["own"]]
        top = f"{library[0]['name'][:50]} {library[0]['ms']:.4f}" if library else "-"
        speed = f"{result.speedup:.2f}x" if result.speedup else "-"
        value = share.get("share")
        if value is not None and result.status == "correct":
            by_kind.setdefault(kind, []).append(value)
        print(
            f"| {label} | {kind} | {result.status} | {speed} | {'-' if value is None else f'{value:.4f}'} "
            f"| {share.get('own_ms', 0):.4f} | {share.get('library_ms', 0):.4f} | {top} |"
        )
    print()
    for kind, values in sorted(by_kind.items()):
        print(
            f"{kind}: n={len(values)} min {min(values):.4f} median {statistics.median(values):.4f} max {max(values):.4f}"
        )
    trivial = by_kind.get("trivial", [])
    honest = [v for k, vs in by_kind.items() if k != "trivial" for v in vs]
    if trivial and honest:
        print(
            f"threshold window: above {max(trivial):.4f} (largest trivial), below {min(honest):.4f} (smallest honest)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
