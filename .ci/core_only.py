"""CI's core-only job: a virtualenv with cudaforge's core dependencies alone (what `pip install -e .`
gives a GPU box) must import every module and split real stock-layout CUDA sources.

Why: the split build once imported a grammar that only an extra installed, and on a plain install
every stock kernel was reported as the kernel's compile error (issue 24). Run by `.ci/run`:

    /path/to/core-venv/bin/python .ci/core_only.py
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
STOCK_SOURCES = [*sorted((ROOT / "tests/fixtures/split").glob("*/kernel.py")), ROOT / "examples/kernels/relu_cuda_stock.py"]


def import_everything() -> list[str]:
    failures = []
    for name in ("engine", "sessions", "tui", "themes"):
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if ".templates" in module.name:  # files shown to the Coder, not code cudaforge runs
                continue
            try:
                importlib.import_module(module.name)
            except Exception as error:  # noqa: BLE001 - every failure is reported
                failures.append(f"import {module.name}: {type(error).__name__}: {error}")
    return failures


def split_everything() -> list[str]:
    from split_coverage import recorded_calls

    from engine.eval.build.split.rewrite import split_sources

    failures = []
    for path in STOCK_SOURCES:
        calls = [c for c in recorded_calls(path) if c.get("cuda", "").strip() or "error" in c]
        if not calls:
            failures.append(f"{path.name}: no load_inline call with CUDA sources")
        for call in calls:
            if "error" in call:
                failures.append(f"{path.name}: {call['error']}")
                continue
            try:
                split = split_sources(call["cpp"], call["cuda"])
            except Exception as error:  # noqa: BLE001 - SplitSkipped included: these fixtures must split
                failures.append(f"split {path.name}: {type(error).__name__}: {error}")
                continue
            print(f"split {path.parent.name}/{path.name}: kernels {', '.join(split.kernels)}")
    return failures


def main() -> int:
    from engine.cli.deps import main as deps_main

    failures = [] if deps_main(["--check"]) == 0 else ["a non-optional import is missing (above)"]
    failures += import_everything()
    failures += split_everything()
    for failure in failures:
        print(f"FAIL {failure}")
    print("core-only install: ok" if not failures else f"core-only install: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
