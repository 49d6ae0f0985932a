"""How many real LLM kernels the split transform (engine/eval/build/split/, issue 16) handles.

Imports each solution of a KernelBench-format corpus with ``load_inline`` replaced by a recorder (no
build happens), runs ``split_sources`` on every recorded call and counts transformed vs skipped by
reason. Any other exception from the transform (an import error of cudaforge's own, a bug) is counted
as ``crashed`` and makes the exit status 1: on a plain install that must never happen (issue 24). With ``--nvcc N`` it also compiles the generated CUDA unit of the first N transformed
kernels with nvcc (``-c``, sm_90, no torch headers) to check that they compile.

    python benchmarks/split_coverage.py /path/to/solutions --nvcc 40 --out /tmp/cov.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.eval.build.split.rewrite import SplitSkipped, split_sources  # noqa: E402


class _Recorded(Exception):
    pass


def recorded_calls(solution: Path) -> list[dict]:
    """The ``load_inline`` calls a solution makes at import, without building anything."""
    import torch.utils.cpp_extension as cpp_extension

    calls: list[dict] = []

    def fake(name, cpp_sources, cuda_sources=None, *args, **kwargs):  # noqa: ANN001, ANN202
        join = lambda s: s if isinstance(s, str) else "\n".join(s or [])  # noqa: E731
        calls.append(
            {
                "name": name,
                "cpp": join(cpp_sources),
                "cuda": join(cuda_sources),
                "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (str, bool, list, type(None)))},
            }
        )
        raise _Recorded

    original = cpp_extension.load_inline
    cpp_extension.load_inline = fake
    try:
        code = compile(solution.read_text(), str(solution), "exec")
        exec(code, {"__name__": "candidate"})  # noqa: S102
    except _Recorded:
        pass
    except BaseException as error:  # noqa: BLE001 - a corpus module may fail at import for any reason
        if not calls:
            calls.append({"error": f"{type(error).__name__}: {error}"[:200]})
    finally:
        cpp_extension.load_inline = original
    return calls


def _reason_class(reason: str) -> str:
    return re.sub(
        r"\(line \d+\)|line \d+:?|'[^']*'|\"[^\"]*\"|\b[A-Za-z_]\w*_kernel\w*|kernel \w+", "…", reason
    )[:90]


def nvcc_compile(cuda: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "unit.cu"
        src.write_text(cuda)
        proc = subprocess.run(
            [
                "nvcc",
                "-c",
                "-std=c++17",
                "-arch=sm_90",
                "-O1",
                "--expt-relaxed-constexpr",
                str(src),
                "-o",
                str(Path(tmp) / "unit.o"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        return proc.returncode == 0, proc.stderr[-1500:]


def gxx_flags() -> list[str]:
    import sysconfig

    import torch.utils.cpp_extension as cpp_extension

    includes = [
        *cpp_extension.include_paths(),
        sysconfig.get_paths()["include"],
        f"{cpp_extension.CUDA_HOME or '/usr/local/cuda'}/include",
    ]
    return ["-std=c++17", "-fPIC", "-DTORCH_API_INCLUDE_EXTENSION_H", *(f"-I{p}" for p in includes)]


def gxx_header(folder: Path) -> list[str]:
    """A precompiled torch/extension.h for the syntax checks (seconds each instead of ~30 s)."""
    import torch.utils.cpp_extension as cpp_extension

    stub = folder / "torch" / "extension.h"
    if not (folder / "torch" / "extension.h.gch").is_file():
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(f'#include "{cpp_extension.include_paths()[0]}/torch/extension.h"\n')
        subprocess.run(["g++", "-x", "c++-header", str(stub), *gxx_flags(), "-o", f"{stub}.gch"], check=True)
    return [f"-I{folder}", "-Winvalid-pch"]


def gxx_check(cpp: str, header: list[str]) -> tuple[bool, str]:
    """g++ -fsyntax-only on the C++ unit (the host code with launcher calls), against torch's headers."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "unit.cpp"
        src.write_text(cpp)
        proc = subprocess.run(
            ["g++", "-fsyntax-only", *header, *gxx_flags(), str(src)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        return proc.returncode == 0, proc.stderr[-1500:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("solutions", type=Path)
    parser.add_argument(
        "--nvcc", type=int, default=0, help="compile the CUDA unit of this many transformed kernels"
    )
    parser.add_argument(
        "--gxx", type=int, default=0, help="g++ -fsyntax-only the C++ unit of this many transformed kernels"
    )
    parser.add_argument("--gxx-header", type=Path, default=Path("/tmp/cudaforge-split-gxx-pch"))
    parser.add_argument("--out", type=Path)
    options = parser.parse_args()
    files = sorted(options.solutions.glob("*.py"))
    rows = []
    reasons: collections.Counter[str] = collections.Counter()
    for f in files:
        calls = recorded_calls(f)
        status, reason = "transformed", ""
        units = []
        for call in calls:
            if "error" in call:
                status, reason = "skipped", "import failed: " + call["error"]
                break
            if not call["cuda"].strip():
                continue
            try:
                units.append(split_sources(call["cpp"], call["cuda"]))
            except SplitSkipped as skip:
                status, reason = "skipped", str(skip)
                break
            except Exception as error:  # noqa: BLE001 - the transform's own fault, counted apart
                status, reason = "crashed", f"{type(error).__name__}: {error}"[:300]
                break
        if not calls:
            status, reason = "skipped", "no load_inline call"
        if status == "skipped":
            reasons[_reason_class(reason)] += 1
        rows.append({"file": f.stem, "status": status, "reason": reason, "units": units})
    compiled = []
    for row in [r for r in rows if r["status"] == "transformed"][: options.nvcc]:
        for unit in row["units"]:
            started = time.monotonic()
            ok, err = nvcc_compile(unit.cuda)
            compiled.append(
                {
                    "file": row["file"],
                    "ok": ok,
                    "seconds": round(time.monotonic() - started, 2),
                    "stderr": "" if ok else err,
                }
            )
            print(f"nvcc {row['file']}: {'ok' if ok else 'FAILED'}", file=sys.stderr, flush=True)
    checked = []
    header = gxx_header(options.gxx_header) if options.gxx else []
    for row in [r for r in rows if r["status"] == "transformed"][: options.gxx]:
        for unit in row["units"]:
            ok, err = gxx_check(unit.cpp, header)
            checked.append({"file": row["file"], "ok": ok, "stderr": "" if ok else err})
            print(f"g++ {row['file']}: {'ok' if ok else 'FAILED'}", file=sys.stderr, flush=True)
    transformed = sum(r["status"] == "transformed" for r in rows)
    crashed = [r for r in rows if r["status"] == "crashed"]
    summary = {
        "kernels": len(rows),
        "transformed": transformed,
        "crashed": len(crashed),
        "crashes": collections.Counter(r["reason"] for r in crashed).most_common(5),
        "share": round(transformed / max(len(rows), 1), 3),
        "skipped_by_reason": reasons.most_common(),
        "nvcc_compiled": len(compiled),
        "nvcc_ok": sum(c["ok"] for c in compiled),
        "nvcc_failures": [c for c in compiled if not c["ok"]],
        "gxx_checked": len(checked),
        "gxx_ok": sum(c["ok"] for c in checked),
        "gxx_failures": [c for c in checked if not c["ok"]],
    }
    print(
        json.dumps(
            {k: v for k, v in summary.items() if not k.endswith("failures")}, indent=1, ensure_ascii=False
        )
    )
    for c in summary["nvcc_failures"] + summary["gxx_failures"]:
        print(f"--- failed: {c['file']}\n{c['stderr'][-600:]}")
    if options.out:
        summary["rows"] = [{k: v for k, v in r.items() if k != "units"} for r in rows]
        options.out.write_text(json.dumps(summary, indent=1))
    return 1 if crashed else 0


if __name__ == "__main__":
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    sys.exit(main())
