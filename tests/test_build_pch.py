"""cudaforge's precompiled torch header: made once per flag set, then used by new builds, on CPU."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.eval.build.pch import first_include, header_key
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from tests.conftest import EXAMPLES

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()


def test_first_include_sees_the_binding_header() -> None:
    assert (
        first_include("// c\n#include <torch/extension.h>\n#include <vector>", implicit_headers=False)
        == "torch/extension.h"
    )
    assert (
        first_include("#include <vector>\n#include <torch/extension.h>", implicit_headers=False) == "vector"
    )
    assert first_include("int x;", implicit_headers=True) == "torch/extension.h"


@pytest.mark.slow
def test_header_is_made_once_then_used_by_a_new_build_and_keeps_old_builds_cached(tmp_path: Path) -> None:
    options = EvalOptions(device="cpu", cache_root=tmp_path, do_timing=False)
    first = evaluate(TASK, KERNEL, options)
    assert first.status == "correct" and first.build.extensions[0].pch == "queued"
    deadline = time.monotonic() + 600
    while not list(tmp_path.glob("pch/*/torch/extension.h.gch")) and time.monotonic() < deadline:
        time.sleep(1)
    assert list(tmp_path.glob("pch/*/torch/extension.h.gch")), (tmp_path / "pch").glob("*/make.log")

    second = evaluate(TASK, KERNEL.replace('name="cf_relu_cpu"', 'name="cf_relu_cpu_pch"'), options)
    ext = second.build.extensions[0]
    assert second.status == "correct" and ext.pch == "used" and not ext.cached
    assert "-Winvalid-pch" in second.build.log and "not used because" not in second.build.log
    print(f"cold build without the header {first.build.seconds:.1f} s, with it {second.build.seconds:.1f} s")
    assert second.build.seconds < first.build.seconds

    again = evaluate(TASK, KERNEL, options)  # built before the header existed: still a cache hit
    assert again.build.cached is True and again.build.extensions[0].pch == ""


def test_an_empty_flag_shares_the_flag_less_header() -> None:
    """Most LLM kernels pass ``extra_cflags=['']``: the same compile command, so the same header set."""
    plain = header_key({}, True)
    assert header_key({"extra_cflags": [""]}, True) == plain == header_key({"extra_cflags": ["  "]}, True)
    assert header_key({"extra_cflags": None}, True) == plain
    assert header_key({"extra_include_paths": [""]}, True) != plain  # torch makes that -I<cwd>: its own set
    assert header_key({"extra_cflags": ["-O3"]}, True) != plain
    assert header_key({"extra_cflags": "-O3"}, True) == header_key({"extra_cflags": ["-O3"]}, True)
    assert header_key({}, False) != plain
