"""A round's own time on a GPU (issue 26): what the Coder did not change is not built again.

Run on the GPU machine: ``pytest tests/test_round_time_gpu.py -m gpu``. The stock-layout ReLU takes the
split build; a fresh cache per test, with the precompiled header not made (each build is seconds).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

TASK = (EXAMPLES / "tasks" / "relu_large.py").read_text()
STOCK = (EXAMPLES / "kernels" / "relu_cuda_stock.py").read_text()
KERNEL_BODY = "__global__ void relu_kernel("


def _units(result) -> dict[str, dict]:  # noqa: ANN001
    assert result.status == "correct", result.messages
    [ext] = result.build.extensions
    assert ext.path == "split"
    return {u["unit"]: u for u in ext.units}


def test_a_kernel_edit_compiles_only_the_cuda_unit_and_a_repeat_compiles_nothing(tmp_path: Path) -> None:
    options = EvalOptions(device="cuda", cache_root=tmp_path, do_timing=False, use_pch=False)
    first = evaluate(TASK, STOCK, options)
    units = _units(first)
    assert first.build.extensions[0].prebuilt is True  # built while the reference was checked
    assert units["main.o"]["seconds"] and units["cuda.cuda.o"]["seconds"]
    # the same kernel again: nothing compiled, nothing linked (nvcc's depfile once recompiled it each time)
    again = evaluate(TASK, STOCK, options)
    assert again.build.extensions[0].cached is True, again.build.log
    # a constant changed in the kernel body: the binding comes from the object cache
    assert KERNEL_BODY in STOCK
    edited = STOCK.replace("    long i = ", "    const int cf_edit = 7; (void)cf_edit;\n    long i = ", 1)
    assert edited != STOCK
    units = _units(evaluate(TASK, edited, options))
    assert units["main.o"]["reused"] is True and units["cuda.cuda.o"]["reused"] is False
    assert units["cuda.cuda.o"]["seconds"] and units["link"]["seconds"]
