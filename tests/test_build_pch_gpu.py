"""A stock CUDA build beside cudaforge's precompiled header, on the GPU machine's own compiler.

Two trust cases (a split-refusing candidate, built the stock way) ended ``compile_error`` on the H100
whenever a header made by an earlier split build of the same flags was ready (sessions 24 and 25): the
compiler's first error was in torch's ``PYBIND11_MODULE`` line of the stock ``main.cpp``. This test, with
the stock build using the header, passed on the H100 in session 25, so it does not reproduce that; stock
builds now leave the header alone (engine.eval.build.extension.STOCK_WITHOUT_HEADER). Here the header is
made the way a user's first split build makes it, then a stock build of the same flags builds correctly
without it, and the header stays for split builds.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from engine.eval.build.pch import HeaderStore, header_key
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.gpu

TASK = (EXAMPLES / "tasks" / "relu_large.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cuda_stock.py").read_text()
CUDA_START = 'cuda_source = r"""'
STOCK_ONLY = "template <int N> struct alignas(4 * N) StockOnly { float v[N]; };\n"  # the split build leaves it alone
assert KERNEL.count(CUDA_START) == 1


def test_a_stock_cuda_build_beside_a_split_builds_header_builds_without_it(tmp_path: Path) -> None:
    options = EvalOptions(device="cuda", cache_root=tmp_path, do_timing=False, use_pch=True, make_pch=True)
    first = evaluate(TASK, KERNEL, options)
    assert first.status == "correct", first.messages
    assert [(e.path, e.pch) for e in first.build.extensions] == [("split", "queued")]
    key = header_key({}, True)
    deadline = time.monotonic() + 400
    while not HeaderStore(tmp_path).ready(key) and time.monotonic() < deadline:
        time.sleep(1)
    assert HeaderStore(tmp_path).ready(key), [p.read_text()[-2000:] for p in (tmp_path / "pch").glob("*/make.log")]

    fresh = f"cf_relu_cuda_stock_{uuid.uuid4().hex[:8]}"
    refused = KERNEL.replace('name="cf_relu_cuda_stock"', f'name="{fresh}"').replace(CUDA_START, CUDA_START + STOCK_ONLY, 1)
    stock = evaluate(TASK, refused, options)
    ext = stock.build.extensions[-1]
    assert stock.status == "correct" and ext.path == "stock", (stock.messages, stock.build.log[-6000:])
    assert ext.pch == "" and "-Winvalid-pch" not in stock.build.log, stock.build.log[-3000:]
    assert HeaderStore(tmp_path).ready(key)
