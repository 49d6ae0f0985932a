"""benchmarks/oneshot.py --edit: each command's kernel differs from every earlier one in its CUDA source
alone, so what it measures is the path after a CUDA-side edit (the binding's unit unchanged)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from engine.eval.build.prebuild import read_calls
from tests.conftest import EXAMPLES

REPO = Path(__file__).resolve().parent.parent


def _oneshot():
    spec = importlib.util.spec_from_file_location("oneshot_bench", REPO / "benchmarks" / "oneshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_edit_changes_the_cuda_source_alone(tmp_path: Path) -> None:
    edited = _oneshot().edited
    kernel = EXAMPLES / "kernels" / "relu_cuda.py"
    (original,) = read_calls(kernel.read_text())
    versions = [read_calls(edited(kernel, n, tmp_path).read_text()) for n in (1, 2)]
    assert [len(v) for v in versions] == [1, 1]
    assert len({original.cuda_sources, *(v[0].cuda_sources for v in versions)}) == 3
    assert all(v[0].cpp_sources == original.cpp_sources and v[0].name == original.name for v in versions)
