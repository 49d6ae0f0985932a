"""The worked example kernels taught to the Coder follow the rules the prompt states."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from engine.agents import extract_kernel
from engine.agents.prompts import example_kernel, template_text

TORCH_INCLUDE = re.compile(r"#include\s*[<\"](torch|ATen|c10)/")


def _strings(source: str) -> dict[str, str]:
    """Module-level string assignments (cuda_source, cpp_source)."""
    out = {}
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out[node.targets[0].id] = node.value.value
    return out


def _load_inline_keywords(source: str) -> dict[str, ast.expr]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_inline":
            return {k.arg: k.value for k in node.keywords}
    raise AssertionError("no load_inline call")


def _forward_calls(source: str) -> list[str]:
    """Dotted names of the calls made inside ModelNew.forward."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    fwd = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    return [ast.unparse(n.func) for n in ast.walk(fwd) if isinstance(n, ast.Call)]


def test_cuda_example_follows_the_fast_layout():
    src = example_kernel("cuda")
    strings = _strings(src)
    cuda, cpp = strings["cuda_source"], strings["cpp_source"]
    assert not TORCH_INCLUDE.search(cuda) and "#include <cuda_runtime.h>" in cuda
    assert (
        "__global__" in cuda and "cudaStream_t stream" in cuda and "<<<blocks, threads, 0, stream>>>" in cuda
    )
    assert (
        "#include <torch/extension.h>" in cpp and "getCurrentCUDAStream()" in cpp and "__global__" not in cpp
    )
    kw = _load_inline_keywords(src)
    assert ast.literal_eval(kw["no_implicit_headers"]) is True
    assert {"cpp_sources", "cuda_sources", "functions", "name"} <= set(kw)
    assert _forward_calls(src) == ["ext.add", "a.contiguous", "b.contiguous"]
    assert extract_kernel(f"```python\n{src}```").code.strip() == src.strip()


def test_cpu_example_is_cpp_only():
    src = example_kernel("cpu")
    strings = _strings(src)
    assert set(strings) == {"cpp_source"} and "cuda" not in strings["cpp_source"].lower()
    kw = _load_inline_keywords(src)
    assert "cuda_sources" not in kw and ast.literal_eval(kw["functions"]) == ["add"]
    assert _forward_calls(src) == ["ext.add", "a.contiguous", "b.contiguous"]


@pytest.mark.slow
def test_cpu_example_builds_and_matches_the_reference(ext_cache: Path) -> None:
    """Build the CPU example for real, as a Coder's kernel is built (the evaluator, its guard and the
    shared build cache, whose precompiled torch header it uses once one is made), and compare it with
    the example reference: exactly equal on every check trial."""
    from engine.eval.evaluate import evaluate
    from engine.eval.options import EvalOptions

    options = EvalOptions(device="cpu", cache_root=ext_cache, do_timing=False)
    reference = template_text("example_reference.py")
    result = evaluate(reference, example_kernel("cpu"), options, task_name="example_reference")
    assert result.status == "correct", (result.messages, result.build.log[-3000:])
    assert [ext.name for ext in result.build.extensions] == ["add_cpu_ext"]
    assert result.trials and all(t.passed and t.max_abs_error == 0.0 for t in result.trials), result.trials
