"""Builds that fail once (engine/eval/build/failures.py; ARCHITECTURE.md §3, "Builds"): a failed build is
not built again in one evaluation, a budget caps its builds, the compiler's first error leads the messages
in the candidate's own lines, and a split build's error in the candidate's own code is not built again the
stock way. Real compilers: nvcc on split units (no GPU needed), g++ through the real worker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from engine.eval.build.failures import (
    all_in_own_code,
    candidate_own_error,
    compiler_errors,
    place_in_stock_sources,
    sources_identity,
)
from engine.eval.build.split.rewrite import split_sources
from engine.eval.build.torchnames import torch_visible_names, undefined_is_own
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from tests.conftest import EXAMPLES

KERNEL = """#include <cuda_runtime.h>
__global__ void scale_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.{axis};
    if (i < n) y[i] = {body};
}}
void scale(const float* x, float* y, int n) {{ scale_kernel<<<(n + 255) / 256, 256>>>(x, y, n); }}
"""


def _nvcc_log(cuda: str, tmp_path: Path) -> str:
    split = split_sources("", cuda)
    (tmp_path / "unit.cu").write_text(split.cuda)
    done = subprocess.run(["nvcc", "-c", "-std=c++17", "--expt-relaxed-constexpr", str(tmp_path / "unit.cu"), "-o", str(tmp_path / "unit.o")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode != 0, "the unit should not compile"
    return done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nvcc_on_a_split_unit_names_the_candidates_own_line_and_whose_fault_it_is(tmp_path: Path) -> None:
    own = _nvcc_log(KERNEL.format(axis="q", body="x[i] * 2.0f"), tmp_path)
    (first,) = compiler_errors(own)[:1]
    assert (first.own, first.own_line) == ("cuda_sources", 3) and '"q"' in first.what
    assert candidate_own_error(own)  # blockIdx.q: the stock build would fail on it too
    # a name a header of torch's may have brought in the stock build (the split unit has none of them)
    undeclared = _nvcc_log(KERNEL.format(axis="x", body="CUDART_PI_F * x[i]"), tmp_path)
    assert compiler_errors(undeclared) and not candidate_own_error(undeclared)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_an_undefined_name_torchs_headers_do_not_declare_is_the_candidates_own_so_stock_is_not_tried(tmp_path: Path) -> None:
    typo = KERNEL.format(axis="x", body="undefined_scale_7(x[i])")
    log, split = _nvcc_log(typo, tmp_path), split_sources("", typo)
    names = torch_visible_names(tmp_path / "cache", typo)
    assert names is not None and "TORCH_CHECK" in names  # torch's headers, read by nvcc (macros too)
    assert compiler_errors(log)[0].what.strip() == 'identifier "undefined_scale_7" is undefined'
    judge = lambda name: undefined_is_own(name, names, typo, split.cuda)  # noqa: E731
    assert candidate_own_error(log, split.host_lines, judge)
    assert not candidate_own_error(log, split.host_lines)  # without the index the split may be at fault
    # a name torch's headers do declare: the stock build may compile it, so it is still tried
    borrowed = KERNEL.format(axis="x", body="x[i] * (float)sizeof(Py_ssize_t)")  # Python.h, through torch's
    log, split = _nvcc_log(borrowed, tmp_path), split_sources("", borrowed)
    assert 'identifier "Py_ssize_t" is undefined' in log
    assert not candidate_own_error(log, split.host_lines, lambda n: undefined_is_own(n, names, borrowed, split.cuda))


def test_an_undefined_name_some_of_whose_mentions_the_split_moved_out_stays_the_splits_possible_doing() -> None:
    names = frozenset({"TORCH_CHECK"})
    sources = "#define SCALE 2.0f\nvoid host() {}\n__global__ void k(float* y) { y[0] = SCALE; }\n"
    kept_all = "__global__ void k(float* y) { y[0] = SCALE; }\n#define SCALE 2.0f\n"
    moved_one = "__global__ void k(float* y) { y[0] = SCALE; }\n"  # its definition went with a host piece
    assert undefined_is_own("SCALE", names, sources, kept_all)
    assert not undefined_is_own("SCALE", names, sources, moved_one)
    assert not undefined_is_own("TORCH_CHECK", names, sources + "TORCH_CHECK", kept_all + "TORCH_CHECK")
    assert not undefined_is_own("SCALE", None, sources, kept_all)  # nothing known: nothing claimed


def test_a_failed_load_is_described_by_the_compilers_first_error_not_by_ninjas_command_line(tmp_path: Path) -> None:
    from engine.eval.build.extension import BuildRecorder, _first_words

    torch_text = (
        "Error building extension 'block_3': [1/3] /usr/local/cuda/bin/nvcc -DTORCH_EXTENSION_NAME=block_3 -isystem /t\n"
        "FAILED: cuda.cuda.o\n/usr/local/cuda/bin/nvcc -c cuda.cu\ncuda_sources(4): error: identifier \"helper\" is undefined\n"
    )
    assert _first_words(torch_text) == 'compiler error at cuda_sources line 4: identifier "helper" is undefined'
    assert _first_words("\nNo module named 'tree_sitter_cuda'\n") == "No module named 'tree_sitter_cuda'"
    recorder = BuildRecorder(tmp_path)  # twenty blocks that each give the same note leave it once
    for _ in range(20):
        recorder._notice("the compile error is in the candidate's own code: not built again the stock way")
    assert len(recorder.notices) == 1


def test_sources_that_read_header_files_of_their_own_are_not_known_by_their_text_alone() -> None:
    from engine.eval.build.extension import sources_key

    plain = "torch::Tensor twice(torch::Tensor x) { return x * 2 }"
    assert sources_key(plain, None, (), {"functions": ["twice"]}) is not None
    assert sources_key('#include "mine.h"\n' + plain, None, (), {"functions": ["twice"]}) is None
    assert sources_key(plain, "__global__ void k() {}", (), {"extra_include_paths": ["/tmp/inc"]}) is None


def test_sources_remembered_by_another_recorder_are_listed_where_they_are_asked_for_again(tmp_path: Path) -> None:
    """The prebuild thread's recorder may fail a source first and remember it by its text; the import's
    recorder asked for it then lists that build, so the result still names the build the error is from."""
    from engine.eval.build.extension import BuildRecorder, sources_key
    from engine.eval.result import ExtensionBuild

    source = "torch::Tensor twice(torch::Tensor x) { return x * 2 }"
    failed = ExtensionBuild(name="cf_a", build_dir=str(tmp_path / "a"), cached=False, seconds=1.0, path="cpp", ok=False)
    importing = BuildRecorder(tmp_path)
    key = sources_key(source, None, (), {"functions": ["twice"]})
    assert key is not None
    importing.ledger.remember_sources(key, "cf_a", RuntimeError("compiler error"), failed)
    with pytest.raises(RuntimeError, match="failed to build earlier in this evaluation as 'cf_a'"):
        importing._build_any_path("cf_b", source, None, (), {"functions": ["twice"]})
    assert importing.builds == [failed]


def test_only_errors_in_code_as_written_count_as_the_candidates_own() -> None:
    moved = "cuda_sources@ext.2:5:3: error: expected ';' before '}' token"
    assert compiler_errors(moved, {"ext.2": 40})[0].own_line == 44 and not candidate_own_error(moved, {"ext.2": 40})
    assert not candidate_own_error("/tmp/b/cuda.cu(3): error: expected a \";\"")  # a stock unit: not the split's
    assert not candidate_own_error("ld: undefined reference to `scale_kernel'")  # no compiler line: not sure
    assert candidate_own_error("cpp_sources:4:10: error: expected ';' before '}' token")


def test_sources_that_failed_are_known_by_their_text_and_options_unless_they_read_the_extensions_name() -> None:
    source = "torch::Tensor twice(torch::Tensor x) { return x * 2 }"
    key = sources_identity(source, "", (), {"functions": ["twice"], "verbose": False})
    # where torch builds and how loudly never change what the compiler says about the code
    assert key == sources_identity(source, "", (), {"functions": ["twice"], "verbose": True, "build_directory": "/b"})
    assert key != sources_identity(source, "", (), {"functions": ["twice"], "extra_cflags": ["-O3"]})
    assert key != sources_identity(source.replace("2", "3"), "", (), {"functions": ["twice"]})
    # a source that reads its extension's name may compile differently under another one
    named = source + "\nstatic const char* which = TORCH_STRINGIFY(TORCH_EXTENSION_NAME);"
    assert sources_identity(named, "", (), {"functions": ["twice"]}) is None


def test_only_errors_all_in_the_candidates_text_stand_for_its_sources_under_any_name(tmp_path: Path) -> None:
    cuda = "__global__ void k(float* y) {\n    y[0] = blockIdx.q;\n}\n"
    (tmp_path / "cuda.cu").write_text("#include <torch/extension.h>\n#include <cuda.h>\n" + cuda)
    own = compiler_errors(f"{tmp_path}/cuda.cu(4): error: class \"uint3\" has no member \"q\"")
    place_in_stock_sources(own[0], tmp_path, "", cuda)
    assert (own[0].own, own[0].own_line) == ("cuda_sources", 2) and all_in_own_code(own)
    # one error in torch's generated lines (where a bad name fails) and the sources alone do not explain it
    generated = compiler_errors(f"{tmp_path}/cuda.cu(1): error: expected a declaration")
    place_in_stock_sources(generated[0], tmp_path, "", cuda)
    assert not all_in_own_code(own + generated) and not all_in_own_code([])


FAILING = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = """
torch::Tensor twice(torch::Tensor x) {
    return x * 2
}
"""
for attempt in range(3):  # one per submodule, as a UNet candidate did
    try:
        ext = load_inline(name="cf_fail_once", cpp_sources=SOURCE, functions=["twice"])
    except Exception as error:
        last = error
for block in range(2):  # and each block under a name of its own, as a CUDA-L1 UNet did
    try:
        ext = load_inline(name=f"cf_fail_block_{block}", cpp_sources=SOURCE, functions=["twice"])
    except Exception as error:
        last = error
raise last


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.twice(x)
'''

TWO_EXTENSIONS = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

first = load_inline(name="cf_budget_a", cpp_sources="torch::Tensor a(torch::Tensor x) { return x; }", functions=["a"])
try:
    second = load_inline(name="cf_budget_b", cpp_sources="torch::Tensor b(torch::Tensor x) { return x; }", functions=["b"])
except Exception:  # a candidate cannot swallow the budget's refusal
    second = None


class ModelNew(nn.Module):
    def forward(self, x):
        return first.a(torch.relu(x))
'''


def _options(cache: Path, **more: object) -> EvalOptions:
    return EvalOptions(device="cpu", trials=1, do_timing=False, cache_root=cache, **more)


@pytest.mark.slow
def test_a_source_that_failed_is_not_built_again_and_its_first_error_leads_in_its_own_lines(ext_cache: Path) -> None:
    task = (EXAMPLES / "tasks" / "relu.py").read_text()
    result = evaluate(task, FAILING, _options(ext_cache), task_name="relu")  # a failed build is never cached
    assert result.status == "compile_error", result.messages
    [ext] = result.build.extensions  # five calls, one build: the prebuild thread's when it ran it
    assert ext.ok is False and ext.name == "cf_fail_once"
    assert result.messages[0].startswith("compiler error at cpp_sources line 3: "), result.messages
    assert any(m.startswith("the extension failed to build: ") for m in result.messages), result.messages
    assert "failed to build earlier in this evaluation: not built again" in result.build.log
    # the same source under the blocks' own names: that failure again, named, without a compiler
    assert "'cf_fail_block_1': the same sources failed to build earlier in this evaluation" in result.build.log
    # the compiler ran once: the import waited for the prebuild thread's failure instead of building again
    # (or of loading the library that build never wrote, which CI once reported instead of the error)
    # (what the thread's compiler said is repeated once, indented, when the import adopts its failure)
    assert [line.startswith("FAILED: ") for line in result.build.log.splitlines()].count(True) == 1, result.build.log


@pytest.mark.slow
def test_past_the_build_budget_the_verdict_is_a_compile_error_that_says_so(ext_cache: Path) -> None:
    task = (EXAMPLES / "tasks" / "relu.py").read_text()
    # a build found done in the shared cache still takes more than a microsecond of the budget
    result = evaluate(task, TWO_EXTENSIONS, _options(ext_cache, build_budget_s=1e-6), task_name="relu")
    assert result.status == "compile_error", result.messages
    assert "build budget spent after 1 build" in result.messages[-1]
    assert [b.name for b in result.build.extensions] == ["cf_budget_a"]
    roomy = evaluate(task, TWO_EXTENSIONS, _options(ext_cache), task_name="relu")
    assert [b.name for b in roomy.build.extensions] == ["cf_budget_a", "cf_budget_b"], roomy.messages  # room for both


def test_a_build_still_running_counts_against_the_budget_before_it_is_charged() -> None:
    """The import may find the prebuild thread's library done and ask for its next build before that
    thread has charged its time: the running build counts as far as it got (CI once built both)."""
    from engine.eval.build.failures import BuildBudgetSpent, BuildLedger

    ledger = BuildLedger(budget_s=1e-9)
    started = ledger.start("a")  # the prebuild thread's build, not yet finished
    assert ledger.start("a") is None  # the import asking for the same build: neither counted nor charged
    with pytest.raises(BuildBudgetSpent, match="build budget spent after 1 build"):
        ledger.start("b")
    ledger.finish("a", started)
    assert ledger.builds == 1 and ledger.spent_s > 0


def test_a_build_asked_for_while_the_prebuild_thread_builds_it_waits_for_that_builds_error() -> None:
    """torch's directory lock makes the import wait for the prebuild thread's build and then load its
    library; when that build failed there is no library, and CI once read "cannot open shared object
    file" where the compiler's error belonged. The import waits for the thread's outcome instead."""
    import threading

    from engine.eval.build.failures import BuildLedger

    ledger = BuildLedger()
    clock = ledger.start("a")  # the prebuild thread's build
    order: list[str] = []
    outcome: list[BaseException | None] = []

    def import_asks() -> None:
        assert ledger.start("a") is None
        outcome.append(ledger.settled("a"))
        order.append("import goes on")

    asking = threading.Thread(target=import_asks)
    asking.start()
    asking.join(0.3)  # the import reaches settled() while the build still runs (or later: same order)
    ledger.remember("a", RuntimeError("error: expected ';'"), [])
    order.append("prebuild failed")
    ledger.finish("a", clock)
    asking.join()
    assert order == ["prebuild failed", "import goes on"]
    assert "expected ';'" in str(outcome[0]) and "not built again" in str(outcome[0])
    assert ledger.settled("b") is None  # a build never started: nothing to wait for


UNDEFINED_HELPER = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = """#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = relu_helper_never_written(x[i]);
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
ext = load_inline(name="cf_undefined_helper", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=CUDA, functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''


@pytest.mark.gpu
def test_on_the_gpu_a_helper_the_kernel_never_wrote_is_a_compile_error_after_the_split_build_alone(tmp_path: Path) -> None:
    """A fresh cache, so nothing is found built: the split build fails in nvcc, and since torch's headers
    declare no such name the stock build (a minute's nvcc over torch's headers) is not tried."""
    task = (EXAMPLES / "tasks" / "relu.py").read_text()
    result = evaluate(task, UNDEFINED_HELPER, EvalOptions(device="cuda", trials=1, do_timing=False, cache_root=tmp_path), task_name="relu")
    assert result.status == "compile_error", result.messages
    assert result.messages[0] == 'compiler error at cuda_sources line 4: identifier "relu_helper_never_written" is undefined'
    assert [e.path for e in result.build.extensions] == ["split"]
    assert "built the stock way" not in result.build.log and result.build.log.count("FAILED: ") == 1


BAD_NAME_THEN_GOOD = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = "torch::Tensor twice(torch::Tensor x) { return x * 2; }"
for name in ("cf-bad-name", "cf_good_name"):  # a name pybind11 cannot take fails outside the source
    try:
        ext = load_inline(name=name, cpp_sources=SOURCE, functions=["twice"])
        break
    except Exception:
        ext = None


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.twice(x) / 2
'''


@pytest.mark.slow
def test_a_failure_outside_the_candidates_own_lines_does_not_stand_for_its_sources_under_another_name(ext_cache: Path) -> None:
    """Only an error in the candidate's own lines is the same under any name: a bad extension name fails in
    torch's generated binding, and the same source under a good name builds and is correct."""
    task = (EXAMPLES / "tasks" / "relu.py").read_text().replace("torch.relu(x)", "x")
    result = evaluate(task, BAD_NAME_THEN_GOOD, _options(ext_cache), task_name="identity")
    assert [(e.name, e.ok) for e in result.build.extensions] == [("cf-bad-name", False), ("cf_good_name", True)], result.messages
    assert "the same sources failed to build earlier" not in result.build.log
