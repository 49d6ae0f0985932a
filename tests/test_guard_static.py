"""Spec of the static guard (engine.guard): one cheat per rule is refused with that rule, honest
kernels pass, the heuristics do not flag size arithmetic or glue, and relaxation is recorded."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from engine.guard import rules as rules_module
from engine.guard.findings import Finding, summarize
from engine.guard.rules import RULES, validate_relax
from engine.guard.static import check_file, check_source

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "guard"
HEADER = re.compile(r"^# expect-(refuse|warn): ([\w, -]+)$", re.M)

KERNEL = r'''
cuda_source = r"""
#include <cuda_runtime.h>
__global__ void add_kernel(const float* a, const float* b, float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i < n) out[i] = a[i] + b[i]; }
void launch_add(const float* a, const float* b, float* out, long n, cudaStream_t s) {
    add_kernel<<<(n + 255) / 256, 256, 0, s>>>(a, b, out, n); }
"""
cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
void launch_add(const float*, const float*, float*, long, cudaStream_t);
torch::Tensor add(torch::Tensor a, torch::Tensor b) { auto out = torch::empty_like(a);
  launch_add(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel(),
             c10::cuda::getCurrentCUDAStream());
  return out; }
"""
ext = load_inline(name="add_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["add"])
'''


def candidate(
    forward: str,
    init: str = "",
    module: str = "",
    methods: str = "",
    kernel: str = KERNEL,
    signature: str = "self, a, b",
) -> str:
    """A complete candidate around the given forward body (the default kernel is honest)."""
    ind = lambda text, n: textwrap.indent(textwrap.dedent(text).strip("\n"), " " * n)  # noqa: E731
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "from torch.utils.cpp_extension import load_inline\n"
        f"{kernel}\n{textwrap.dedent(module)}\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        f"{ind(init, 8)}\n\n{ind(methods, 4)}\n\n    def forward({signature}):\n{ind(forward, 8)}\n"
    )


def refused_rules(source: str, backend: str = "cuda", relax: tuple[str, ...] = ()) -> set[str]:
    return {f.rule for f in summarize(check_source(source, backend, relax)).refusals}


def all_rules(source: str, backend: str = "cuda") -> set[str]:
    return {f.rule for f in check_source(source, backend)}


# ---------------------------------------------------------------------------------------------- fixtures
def _fixture_expectations(path: Path) -> tuple[str, set[str], str]:
    text = path.read_text()
    m = HEADER.search(text)
    assert m, f"{path.name} has no '# expect-refuse:' or '# expect-warn:' header"
    backend = "cpu" if "# backend: cpu" in text else "cuda"
    return m.group(1), {r.strip() for r in m.group(2).split(",")}, backend


CHEATS = sorted(FIXTURES.glob("cheat_*.py"))


@pytest.mark.parametrize("path", CHEATS, ids=[p.stem for p in CHEATS])
def test_cheat_fixture_is_caught_by_exactly_its_rule(path: Path) -> None:
    kind, expected, backend = _fixture_expectations(path)
    summary = summarize(check_file(path, backend))
    refused = {f.rule for f in summary.refusals}
    if kind == "refuse":
        assert summary.refused
        assert refused == expected, [str(f) for f in summary.refusals]
    else:
        assert not summary.refused, [str(f) for f in summary.refusals]
        assert expected <= {f.rule for f in summary.warnings}


def test_every_rule_has_a_fixture_named_after_it() -> None:
    covered = set()
    for path in CHEATS:
        _, expected, _ = _fixture_expectations(path)
        assert path.stem.removeprefix("cheat_") in expected
        covered |= expected
    assert covered == set(RULES)


def _honest_kernels() -> list[Path]:
    """Every honest kernel of the repository: guard fixtures, examples, test kernels, agent templates."""
    found = set(FIXTURES.glob("honest_*.py"))
    found |= set(ROOT.glob("examples/**/kernels/*.py"))
    found |= {p for p in ROOT.glob("tests/kernels/**/*.py") if not p.name.startswith(("cheat_", "bad_"))}
    found |= set(ROOT.glob("engine/agents/templates/example_*.py"))
    # references and task files hold `Model`, not a candidate: they are not kernels to guard
    return sorted(p for p in found if "class ModelNew" in p.read_text())


def _backend_of(source: str) -> str:
    if "# backend: cpu" in source:
        return "cpu"
    return "cuda" if "cuda_sources" in source or "__global__" in source else "cpu"


def _policy_of(source: str) -> str:
    """The policy a kernel is written for: ``strict`` (full replacement) unless it says ``default``
    (PyTorch layers kept beside its own kernels, as the model path's kernels do)."""
    return "default" if "# guard policy: default" in source else "strict"


def test_zero_false_refusals_over_all_honest_kernels() -> None:
    kernels = _honest_kernels()
    assert len([p for p in kernels if p.name.startswith("honest_")]) >= 6
    refusals = {}
    for path in kernels:
        source = path.read_text()
        summary = summarize(check_source(source, _backend_of(source), policy=_policy_of(source)))
        if summary.refused:
            refusals[str(path.relative_to(ROOT))] = [str(f) for f in summary.refusals]
    assert refusals == {}


def test_honest_fixtures_raise_no_warnings_either() -> None:
    for path in FIXTURES.glob("honest_*.py"):
        source = path.read_text()
        assert check_source(source, _backend_of(source)) == [], path.name


# ---------------------------------------------------------------------------------------------- rules table
def test_rule_table_in_docstring_is_the_rule_registry() -> None:
    table_ids = re.findall(r"^\| ([a-z0-9-]+)\s+\| (?:refuse|warn)", rules_module.__doc__ or "", re.M)
    assert len(table_ids) == len(set(table_ids)) == len(RULES) >= 30
    assert set(table_ids) == set(RULES)
    assert RULES["torch-compute-in-forward"].severity == "refuse"
    assert RULES["state-in-forward"].severity == "warn"


# ---------------------------------------------------------------------------------------------- API
def test_findings_are_json_able_and_carry_rule_line_message_severity() -> None:
    source = candidate("out = ext.add(a, b)\nreturn out * 2")
    findings = check_source(source)
    assert len(findings) == 1
    f = findings[0]
    assert (f.rule, f.severity, f.relaxed) == ("tensor-arithmetic-in-forward", "refuse", False)
    assert source.splitlines()[f.line - 1].strip() == "return out * 2"
    assert "out * 2" in f.message
    payload = json.loads(json.dumps(summarize(findings).to_dict()))
    assert payload["refused"] is True
    assert payload["refusals"][0] == {
        "rule": f.rule,
        "severity": "refuse",
        "line": f.line,
        "message": f.message,
        "relaxed": False,
    }


def test_relaxed_rule_is_recorded_but_does_not_refuse() -> None:
    source = candidate("out = ext.add(a, b)\nreturn out * 2")
    findings = check_source(source, relax=["tensor-arithmetic-in-forward"])
    summary = summarize(findings)
    assert not summary.refused
    assert [f.relaxed for f in findings] == [True]
    assert summary.relaxed_rules == ["tensor-arithmetic-in-forward"]
    assert summary.warnings == findings
    assert "guards passed" in summary.message()


def test_relaxing_one_rule_keeps_the_others() -> None:
    source = candidate("return torch.relu(ext.add(a, b)) * 2")
    assert refused_rules(source, relax=("tensor-arithmetic-in-forward",)) == {"torch-compute-in-forward"}


def test_unknown_relax_id_and_backend_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown guard rule"):
        check_source(candidate("return ext.add(a, b)"), relax=["tensor-arithmetics"])
    with pytest.raises(ValueError, match="backend"):
        check_source(candidate("return ext.add(a, b)"), backend="rocm")  # type: ignore[arg-type]
    assert validate_relax(["side-stream"]) == frozenset({"side-stream"})


def test_summary_message_lists_refusals() -> None:
    summary = summarize([Finding("side-stream", "refuse", 7, "creates its own CUDA stream")])
    assert summary.refused and "line 7: [side-stream]" in summary.message()


def test_candidate_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n" + candidate(
        "return ext.add(a, b)"
    )
    assert refused_rules(source) == {"file-access"}
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- honest glue
HONEST_FORWARDS = {
    "allocation_and_views": """
        out = torch.empty(a.shape, device=a.device, dtype=a.dtype)
        tmp = a.new_empty(a.size())
        buf = torch.empty_like(b).zero_()
        flat = a.reshape(-1)[: a.numel()].view(a.shape).contiguous()
        return ext.add(flat, b.permute(0, 1).transpose(0, 1).t().float().to(torch.float32))
    """,
    "size_arithmetic_and_checks": """
        n = a.numel() // 4
        rows, cols = a.shape
        grid = (rows * cols + 255) // 256 - a.size(0) % 2 + a.shape[0] * 2 + len(a) - n
        assert a.dim() == 2 and a.is_contiguous() and a.dtype == torch.float32
        if a.dim() == 2 and a.shape == b.shape and a.shape[0] > 0 and grid >= -1 and a is not None:
            a = a.view(rows, cols)
        return ext.add(a, b)
    """,
    "helpers_and_int_helpers": """
        blocks = _blocks(a.numel())
        return self._run(a, b, blocks)
    """,
    "multi_output_and_unpacking": """
        x, y = a.unsqueeze(0), b.unsqueeze(0)
        out1 = ext.add(x, y)
        out2 = ext.add(a.squeeze(), b.flatten().view_as(a))
        first, *rest = (out1, out2)
        return first.squeeze(0), rest[0]
    """,
    "no_grad_and_stream_query": """
        with torch.no_grad():
            stream = torch.cuda.current_stream().cuda_stream
            assert stream is not None or torch.cuda.is_available()
            return ext.add(a, b)
    """,
}


@pytest.mark.parametrize("name", sorted(HONEST_FORWARDS))
def test_glue_and_size_arithmetic_are_not_flagged(name: str) -> None:
    module = "def _blocks(n):\n    return (n + 255) // 256\n"
    methods = "def _run(self, a, b, blocks):\n    assert blocks * 256 >= 0\n    return ext.add(a, b)\n"
    source = candidate(HONEST_FORWARDS[name], module=module, methods=methods)
    assert check_source(source) == []


def test_extension_functions_named_like_torch_ops_are_kernel_calls() -> None:
    kernel = KERNEL.replace('functions=["add"]', 'functions=["add", "matmul"]')
    source = candidate(
        "y = self.op.matmul(a, b)\nreturn ext.sum(y) if False else self.op.add(a, y)",
        init="self.op = ext",
        kernel=kernel,
    )
    assert check_source(source) == []


def test_setattr_on_self_and_environment_are_fine() -> None:
    source = candidate(
        "return ext.add(a, self.w0)",
        init='for i in range(2):\n    setattr(self, f"w{i}", nn.Parameter(torch.randn(4)))',
        module='import os\nos.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"\n',
    )
    assert check_source(source) == []


def test_lazily_built_extension_through_global_getter() -> None:
    module = """
        _EXT = None

        def get_ext():
            global _EXT
            if _EXT is None:
                _EXT = load_inline(name="lazy", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["add"])
            return _EXT
    """
    source = candidate(
        "return get_ext().add(a, b)",
        module=module,
        kernel=KERNEL.replace("ext = load_inline", "_unused = load_inline"),
    )
    assert refused_rules(source) == set()


def test_registered_torch_op_counts_as_kernel_call_but_aten_does_not() -> None:
    assert refused_rules(candidate("return torch.ops.my_ext.add(a, b)")) == set()
    assert refused_rules(candidate("return torch.ops.aten.add(a, b)")) == {
        "torch-compute-in-forward",
        "kernel-not-called",
    }


# ---------------------------------------------------------------------------------------------- hot-path compute
COMPUTE_CASES = {
    # forward body -> rules refused
    "return torch.matmul(a, b)": {"torch-compute-in-forward", "kernel-not-called"},
    "return ext.add(a, b).sum()": {"torch-compute-in-forward"},
    "return ext.add(a, b) @ b": {"tensor-arithmetic-in-forward"},
    "return ext.add(-a, b)": {"tensor-arithmetic-in-forward"},
    "out = ext.add(a, b)\nout += 1\nreturn out": {"tensor-arithmetic-in-forward"},
    "out = ext.add(a, b)\nreturn out[out > 0]": {"tensor-arithmetic-in-forward", "torch-compute-in-forward"},
    "return ext.add(a, b) + self.bias": {"tensor-arithmetic-in-forward"},
    "return F.softmax(ext.add(a, b), dim=-1)": {"functional-in-forward"},
    "return nn.functional.relu(ext.add(a, b))": {"functional-in-forward"},
    "return ext.add(a, b).clamp(min=0)": {"torch-compute-in-forward"},
    "return torch.Tensor.add(ext.add(a, b), 1)": {"torch-compute-in-forward"},
    "return getattr(torch, 'relu')(ext.add(a, b))": {"torch-compute-in-forward"},
    "return getattr(ext.add(a, b), 'relu')()": {"torch-compute-in-forward"},
    "return ext.add(a, b).abs() if sum(a) else a": {"torch-compute-in-forward"},
    "return nn.ReLU()(ext.add(a, b))": {"submodule-compute-in-forward"},
    "return self.fc(ext.add(a, b))": {"submodule-compute-in-forward"},
    "return self.seq(ext.add(a, b))": {"submodule-compute-in-forward"},
    "for layer in self.layers:\n    a = layer(a)\nreturn ext.add(a, b)": {"submodule-compute-in-forward"},
    "return self.act(ext.add(a, b))": {"torch-compute-in-forward"},
    "return self.lam(ext.add(a, b))": {"torch-compute-in-forward"},
    "return self._scale(ext.add(a, b))": {"tensor-arithmetic-in-forward"},
    "return _double(ext.add(a, b))": {"tensor-arithmetic-in-forward"},
    "return mm(ext.add(a, b), b)": {"torch-compute-in-forward"},
    "return Helper()(ext.add(a, b))": {"tensor-arithmetic-in-forward"},
    "return self.blk(ext.add(a, b))": {"submodule-compute-in-forward"},
}
COMPUTE_INIT = """
self.bias = nn.Parameter(torch.zeros(4))
self.fc = nn.Linear(4, 4)
self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
self.act = torch.sigmoid
self.lam = lambda t: t.exp()
self.blk = MyLinear(4, 4)
"""
COMPUTE_MODULE = """
mm = torch.mm


def _double(t):
    return t * 2


class Helper(nn.Module):
    def forward(self, x):
        return x - 1


class MyLinear(nn.Linear):
    pass
"""
COMPUTE_METHODS = "def _scale(self, t):\n    return t / 3\n"


@pytest.mark.parametrize("forward", sorted(COMPUTE_CASES))
def test_pytorch_compute_on_the_hot_path_is_refused(forward: str) -> None:
    source = candidate(forward, init=COMPUTE_INIT, module=COMPUTE_MODULE, methods=COMPUTE_METHODS)
    assert refused_rules(source) == COMPUTE_CASES[forward]


def test_init_and_module_level_may_use_torch_freely() -> None:
    init = "w = torch.randn(4, 4)\nself.w = nn.Parameter(F.normalize(w @ w.t(), dim=0) * 2)\nself.fc = nn.Linear(4, 4)"
    source = candidate("return ext.add(a, self.w)", init=init, module="SCALE = torch.ones(3).sum() * 2\n")
    assert check_source(source) == []


def test_non_tensor_forward_arguments_are_python_values() -> None:
    source = candidate(
        "return ext.add(a, b) if scale * 2 > 1 and flag == 'x' else b",
        signature="self, a, b, scale=1.5, flag: str = 'x'",
    )
    assert check_source(source) == []
    assert refused_rules(candidate("return ext.add(a, b) * c", signature="self, a, b, c")) == {
        "tensor-arithmetic-in-forward"
    }


# ---------------------------------------------------------------------------------------------- whole file
WHOLE_FILE_CASES = {
    "torch.backends.cuda.matmul.allow_tf32 = True": "monkeypatch-torch",
    "import time\ntime.perf_counter = lambda: 0.0": "timing-patched",
    "class FastEvent(torch.cuda.Event):\n    pass": "timing-patched",
    "setattr(torch.cuda, 'synchronize', lambda: None)": "sync-patched",
    "torch.cuda.current_stream = lambda *a: None": "stream-swap",
    "torch.cuda.set_stream(torch.cuda.Stream())": "stream-swap",
    "import subprocess": "threads-or-processes",
    "import os\nos.system('true')": "threads-or-processes",
    "from concurrent.futures import ThreadPoolExecutor": "threads-or-processes",
    "import socket": "network-access",
    "torch.hub.load('x/y', 'z')": "network-access",
    "import triton": "foreign-compiler",
    "import gc\nobjs = gc.get_objects()": "runtime-tampering",
    "import sys\nREF = sys.modules['__main__']": "runtime-tampering",
    "exec('x = 1')": "runtime-tampering",
    "NAME = 'mat' + 'mul'\nOP = getattr(torch, NAME)": "runtime-tampering",
    "def f(t):\n    t.__class__ = torch.Tensor": "tensor-subclass",
    "F2 = torch.jit.fork\nFUT2 = F2(len, [1])": "async-tricks",
    "FUT = torch.jit.fork(len, [1])": "async-tricks",
    "torch.set_num_threads(1)": "torch-global-state",
    "import pickle": "file-access",
    "from task import Model": "reference-model-used",
}


@pytest.mark.parametrize("module", sorted(WHOLE_FILE_CASES))
def test_file_wide_cheats_are_refused_anywhere(module: str) -> None:
    rules = refused_rules(candidate("return ext.add(a, b)", module=module))
    assert WHOLE_FILE_CASES[module] in rules


def test_patching_inside_init_is_refused_too() -> None:
    source = candidate("return ext.add(a, b)", init="torch.testing.assert_close = lambda *a, **k: None")
    assert refused_rules(source) == {"monkeypatch-torch"}


def test_fallbacks_and_caches_on_the_hot_path() -> None:
    suppress = candidate(
        "with contextlib.suppress(Exception):\n    return ext.add(a, b)\nreturn a",
        module="import contextlib\n",
    )
    assert refused_rules(suppress) == {"try-except-fallback"}
    memo = candidate(
        "return self._cached(a, b)",
        methods="@functools.lru_cache(maxsize=8)\ndef _cached(self, a, b):\n    return ext.add(a, b)\n",
        module="import functools\n",
    )
    assert refused_rules(memo) == {"output-cache"}
    by_id = candidate(
        "k = id(a)\nif k not in CACHE:\n    CACHE[k] = ext.add(a, b)\nreturn CACHE[k]", module="CACHE = {}\n"
    )
    assert refused_rules(by_id) == {"output-cache"}
    global_dict = candidate(
        "out = ext.add(a, b)\nRESULTS[a.shape[0]] = out\nreturn out", module="RESULTS = dict()\n"
    )
    assert refused_rules(global_dict) == {"output-cache"}
    local_dict = candidate("seen = {}\nseen['x'] = 1\nreturn ext.add(a, b)")
    assert refused_rules(local_dict) == set()


def test_try_outside_hot_path_only_warns() -> None:
    source = candidate("return ext.add(a, b)", init="try:\n    import numpy\nexcept ImportError:\n    pass")
    assert refused_rules(source) == set()
    assert "try-except-elsewhere" in all_rules(source)


# ---------------------------------------------------------------------------------------------- native sources
def _with_cpp(extra_cpp: str) -> str:
    return candidate(
        "return ext.add(a, b)", kernel=KERNEL.replace("  return out; }", extra_cpp + "\n  return out; }")
    )


NATIVE_CASES = {
    "cudaStream_t s2; cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);": "side-stream",
    "auto s3 = c10::cuda::getStreamFromPool(true);": "side-stream",
    "c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool());": "side-stream",
    "std::thread t([]{}); t.detach();": "threads-or-processes",
    "at::launch([]{});": "torch-compute-in-extension",  # ATen's inter-op pool: outside the allowed at:: calls
    "CUstream s4; cuStreamCreate(&s4, 0);": "side-stream",
    "CUcontext own; cuCtxCreate(&own, 0, 0);": "side-stream",
    "CUgreenCtx green; cuGreenCtxCreate(&green, desc, dev, 0);": "side-stream",
    'FILE* f = fopen("/tmp/x", "r");': "file-access",
    "out = at::native::add(out, a);": "torch-compute-in-extension",
    "out = torch::nn::functional::relu(out);": "torch-compute-in-extension",
    "out = out.mm(b);": "torch-compute-in-extension",
    "out = at::relu(out);": "torch-compute-in-extension",
}


@pytest.mark.parametrize("cpp", sorted(NATIVE_CASES))
def test_native_source_cheats_are_refused(cpp: str) -> None:
    source = _with_cpp(cpp)
    assert refused_rules(source) == {NATIVE_CASES[cpp]}
    finding = next(f for f in check_source(source) if f.rule == NATIVE_CASES[cpp])
    assert cpp.split("(")[0].split()[-1].split(".")[-1] in source.splitlines()[finding.line - 1]


def test_native_allocation_comments_and_literals_are_fine() -> None:
    ok = _with_cpp(
        "auto z = torch::zeros({4}, a.options()); auto e = at::empty({2}, a.options());\n"
        "// a fallback could call torch::matmul(a, b) or cudaStreamCreate here\n"
        'TORCH_CHECK(a.numel() > 0, "torch::matmul( is not used; std::thread neither");\n'
        "auto st = at::cuda::getCurrentCUDAStream(); auto opts = torch::TensorOptions().dtype(torch::kFloat);"
    )
    assert check_source(ok) == []


def test_cuda_backend_needs_a_built_global_kernel_cpu_backend_does_not() -> None:
    cpp_only = '''
cpp_source = r"""
#include <torch/extension.h>
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    const float* x = a.data_ptr<float>(); const float* y = b.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (long i = 0; i < a.numel(); ++i) o[i] = x[i] + y[i];
    return out; }
"""
ext = load_inline(name="add_cpu", cpp_sources=cpp_source, functions=["add"])
'''
    source = candidate("return ext.add(a, b)", kernel=cpp_only)
    assert refused_rules(source, "cpu") == set()
    assert refused_rules(source, "cuda") == {"no-global-kernel"}
    docstring_only = source.replace(
        "import torch\n", '"""Mentions __global__ void k() only here."""\nimport torch\n', 1
    )
    assert refused_rules(docstring_only, "cuda") == {"no-global-kernel"}


def test_kernel_in_concatenated_and_dedented_sources_is_seen() -> None:
    kernel = (
        KERNEL.replace("cuda_sources=cuda_source", "cuda_sources=[textwrap.dedent(HEADER + cuda_source)]")
        + 'HEADER = "#include <cuda_runtime.h>\\n"\n'
    )
    source = "import textwrap\n" + candidate("return ext.add(a, b)", kernel=kernel)
    assert check_source(source) == []


def test_load_from_files_is_refused() -> None:
    kernel = 'ext = torch.utils.cpp_extension.load(name="ext", sources=["add.cpp", "add_kernel.cu"])\n'
    source = candidate("return ext.add(a, b)", kernel=kernel)
    assert refused_rules(source) == {"file-access", "no-global-kernel"}


def test_cpu_backend_threads_in_native_code_are_refused() -> None:
    cpu = '''
cpp_source = r"""
#include <torch/extension.h>
#include <thread>
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    std::thread worker([&] { out.copy_(a); });
    worker.detach();
    return out; }
"""
ext = load_inline(name="add_cpu", cpp_sources=cpp_source, functions=["add"])
'''
    assert refused_rules(candidate("return ext.add(a, b)", kernel=cpu), "cpu") == {"threads-or-processes"}


def test_lazily_built_extension_through_a_method() -> None:
    methods = """
        def _ops(self):
            if self._ext is None:
                self._ext = load_inline(name="lazy", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["add"])
            return self._ext
    """
    source = candidate(
        "return self._ops().add(a, b)",
        init="self._ext = None",
        methods=methods,
        kernel=KERNEL.replace("ext = load_inline", "_unused = load_inline"),
    )
    assert check_source(source) == []


def test_overriding_call_joins_the_hot_path() -> None:
    methods = "def __call__(self, a, b):\n    return torch.relu(self.forward(a, b))\n"
    assert refused_rules(candidate("return ext.add(a, b)", methods=methods)) == {"torch-compute-in-forward"}


def test_forward_hooks_are_refused() -> None:
    init = "self.register_forward_hook(lambda mod, args, out: out.relu_())"
    assert refused_rules(candidate("return ext.add(a, b)", init=init)) == {"runtime-tampering"}


def test_forward_bound_from_a_module_function_is_followed() -> None:
    source = (
        candidate("return ext.add(a, b)").replace(
            "    def forward(self, a, b):\n        return ext.add(a, b)\n", "    forward = _forward\n"
        )
        + "\n"
    )
    source = source.replace(
        "class ModelNew", "def _forward(self, a, b):\n    return ext.add(a, b) * 2\n\n\nclass ModelNew"
    )
    assert refused_rules(source) == {"tensor-arithmetic-in-forward"}
    assert refused_rules(source.replace(" * 2", "")) == set()


def test_layer_attributes_that_are_not_tensors_are_python_values() -> None:
    init = "self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)"
    forward = """
        k = self.conv.kernel_size[0]
        h = (a.shape[2] + 2 * self.conv.padding[0] - k) // self.conv.stride[0] + 1
        assert h > 0 and self.conv.weight.shape[1] * k > 0
        bias = self.conv.bias if self.conv.bias is not None else torch.empty(0, device=a.device)
        return ext.add(self.conv.weight.contiguous(), bias)
    """
    assert check_source(candidate(forward, init=init)) == []


def test_configured_relaxations_are_recorded_even_when_silent() -> None:
    findings = check_source(candidate("return ext.add(a, b)"), relax=["side-stream"])
    summary = summarize(findings, relax=["side-stream"])
    assert findings == [] and not summary.refused
    assert summary.relaxed_rules == ["side-stream"]


def test_the_extension_forward_calls_must_be_the_one_built_with_the_kernel() -> None:
    two_builds = (
        KERNEL
        + '''
cpu_only = load_inline(name="cpu_add", cpp_sources="""
#include <torch/extension.h>
torch::Tensor add(torch::Tensor a, torch::Tensor b) { return torch::empty_like(a); }
""", functions=["add"])
'''
    )
    assert refused_rules(candidate("return cpu_only.add(a, b)", kernel=two_builds)) == {"kernel-not-built"}
    assert refused_rules(candidate("return ext.add(a, b)", kernel=two_builds)) == set()


def test_kernel_called_only_outside_forward_is_not_called() -> None:
    source = candidate("return torch.empty_like(a)", init="ext.add(torch.ones(1), torch.ones(1))")
    assert refused_rules(source) == {"kernel-not-called"}


@pytest.mark.parametrize(
    "forward",
    [
        "op = self.op\nreturn op.add(a, b)",
        "fn = getattr(self.op, 'add')\nreturn fn(a, b)",
        "return self.table['add'](a, b)",
        "return self.fns[0](a, b)",
    ],
)
def test_extension_reached_through_locals_getattr_and_containers(forward: str) -> None:
    init = "self.op = ext\nself.table = {'add': ext.add}\nself.fns = [ext.add]"
    assert check_source(candidate(forward, init=init)) == []
