"""A split build's C++ unit names each piece of cuda_sources apart and numbers it from 1
(engine/eval/build/split/lines.py): a kernel that grows above the host code leaves the unit, and so the
binding's object, unchanged; every message that quotes the unit is shown with the candidate's own lines."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.eval.build.split.lines import absolute_lines, piece_tag
from engine.eval.build.split.rewrite import split_sources
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult, ExtensionBuild
from engine.eval.supervisor import WorkerSupervisor

CUDA = r"""
#include <torch/extension.h>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")

__global__ void scale_kernel(const float* in, float* out, float s, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * s;
}

torch::Tensor scale_cuda(torch::Tensor x, double s) {
    CHECK_CUDA(x);
    auto out = torch::empty_like(x);
    scale_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), (float)s, x.numel());
    return out;
}
"""
CPP = "torch::Tensor scale_cuda(torch::Tensor x, double s);"
# The Coder's usual change: the kernel rewritten, lines added above the host function
GROWN = CUDA.replace(
    "    if (i < n) out[i] = in[i] * s;\n",
    "    if (i >= n) {\n        return;\n    }\n    out[i] = in[i] * s;\n",
)


def _line_of(source: str, text: str) -> int:
    return source.splitlines().index(text) + 1  # the string's first line is line 1, as nvcc and g++ count


def test_a_kernel_that_grows_above_the_host_code_leaves_the_cpp_unit_unchanged() -> None:
    before, after = split_sources(CPP, CUDA, "ext"), split_sources(CPP, GROWN, "ext")
    assert before.cuda != after.cuda  # the kernel did change
    assert before.cpp == after.cpp  # the binding did not: its object is reused
    host = "torch::Tensor scale_cuda(torch::Tensor x, double s) {"
    [piece] = [name for name, line in before.host_lines.items() if line == _line_of(CUDA, host)]
    assert after.host_lines[piece] == _line_of(GROWN, host) == _line_of(CUDA, host) + 3


def test_messages_name_the_candidates_own_lines() -> None:
    split = split_sources(CPP, GROWN, "my_ext")
    host = _line_of(GROWN, "torch::Tensor scale_cuda(torch::Tensor x, double s) {")
    [piece] = [name for name, line in split.host_lines.items() if line == host]
    assert f'#line 1 "cuda_sources@{piece}"' in split.cpp
    gcc = f"cuda_sources@{piece}: In function 'at::Tensor scale_cuda(at::Tensor, double)':\n"
    gcc += f"cuda_sources@{piece}:2:5: error: 'CHECK_CUDAX' was not declared in this scope"
    c10 = f"x must be a CUDA tensor\nException raised from scale_cuda at cuda_sources@{piece}:2 (most recent call first):"
    assert absolute_lines(gcc, split.host_lines) == (
        "cuda_sources: In function 'at::Tensor scale_cuda(at::Tensor, double)':\n"
        f"cuda_sources:{host + 1}:5: error: 'CHECK_CUDAX' was not declared in this scope"
    )
    assert f"at cuda_sources:{host + 1} (most recent" in absolute_lines(c10, split.host_lines)
    # another extension's pieces, and text naming no piece, are left as they are
    assert (
        absolute_lines("cuda_sources@other.1:3: error", split.host_lines) == "cuda_sources@other.1:3: error"
    )
    assert absolute_lines("cuda_sources(12): error", split.host_lines) == "cuda_sources(12): error"


def test_each_extension_names_its_pieces_apart() -> None:
    assert piece_tag("my-ext v2") == "my_ext_v2" and piece_tag("") == "ext"
    one, two = split_sources(CPP, CUDA, piece_tag("one")), split_sources(CPP, CUDA, piece_tag("two"))
    assert not set(one.host_lines) & set(two.host_lines)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_gcc_quotes_a_piece_in_the_form_that_is_mapped_back(tmp_path: Path) -> None:
    """The mapping reads what the compiler really writes (no torch here: a piece with an error)."""
    unit = tmp_path / "main.cpp"
    unit.write_text('#line 1 "cuda_sources@ext.3"\nint f() {\n    return undeclared_name;\n}\n')
    done = subprocess.run(["g++", "-fsyntax-only", str(unit)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "cuda_sources@ext.3:2:12: error" in done.stderr, done.stderr  # the piece's second line
    assert "cuda_sources:41:12: error" in absolute_lines(done.stderr, {"ext.3": 40})


def test_the_evaluating_process_shows_every_text_with_the_candidates_lines(tmp_path: Path) -> None:
    """The worker says where the pieces start when the build begins; the verdict's log, messages and
    error then name the candidate's lines. What the worker sent is checked before it is used."""
    run = WorkerSupervisor(tmp_path, EvalOptions(device="cpu"), tmp_path / "cache", None)
    run._handle(
        {
            "type": "build_dir",
            "path": str(tmp_path / "b"),
            "host_lines": {"ext.4": 10, "bad": "x", "ext.9": -1},
        }
    )
    assert run.host_lines == {"ext.4": 10}
    quoted = "Exception raised from scale_cuda at cuda_sources@ext.4:2"
    (tmp_path / "worker.log").write_text(f"cuda_sources@ext.4:3:1: error: nope\n{quoted}\n")
    run.stage_marks["build"] = 0
    final = EvalResult(status="runtime_error", messages=[quoted])
    final.error = {"type": "RuntimeError", "message": quoted, "traceback": quoted}
    final.build.extensions = [
        ExtensionBuild("ext", str(tmp_path / "b"), False, 1.0, "split", host_lines={"ext.4": 10})
    ]
    run.final = final.to_dict()
    result = run._assemble(0, False)
    assert "cuda_sources:12:1: error" in result.build.log and "cuda_sources:11" in result.stderr_tail
    assert result.messages[-1].endswith("at cuda_sources:11")
    assert result.error["message"].endswith("cuda_sources:11") and "@" not in result.error["traceback"]
