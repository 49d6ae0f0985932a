"""The trust holes of issue 45, closed on CPU with real candidates, real builds and the real worker:
an extension that failed to load, results replayed by value or by storage, kernels attributed from the
built binary, L2 persistence named by the static guard and undone before each timed call."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.result import EvalResult
from engine.eval.timing import TimingPlan
from tests.fixtures.trust.cpu_trust import candidate, failing_load

TASK = Path(__file__).parent / "fixtures" / "trust" / "matmul_small.py"


def run(source: str, cache: Path, **options: object) -> EvalResult:
    settings = {"device": "cpu", "cache_root": cache, "timing": TimingPlan(min_trials=20, budget_s=10.0), **options}
    return evaluate(TASK.read_text(), source, EvalOptions(**settings), task_name="matmul_small")


def runtime_rules(result: EvalResult) -> list[str]:
    return [f["rule"] for f in result.findings if f.get("source") == "runtime"]


@pytest.mark.slow
def test_an_honest_kernel_is_timed_over_several_verified_input_sets(ext_cache: Path) -> None:
    result = run(candidate("matmul_naive"), ext_cache)
    assert result.status == "correct", result.messages
    replay = result.settings["replay"]
    assert replay["sets"] == 3 and replay["timed_calls_checked"] >= 2 and replay["probe_sets"] == 2
    assert replay["fresh_median_ms"] > 0 and replay["seen_median_ms"] > 0
    assert replay["timed_median_ms"] == result.timing.candidate.median_ms  # what the probe weighs fresh calls by
    assert {"warmup_check", "samples", "inputs", "probe"} <= set(replay["parts_ms"])  # where its time went
    assert "output-replayed" not in runtime_rules(result)
    # freed memory stays mapped (engine.eval.hostheap): without it, an honest first call on new inputs
    # could pay page faults its calls on seen inputs did not, and look like a replay
    assert result.settings["host_heap_kept"] is True


@pytest.mark.slow
def test_a_value_keyed_memo_is_refused_as_replayed(ext_cache: Path) -> None:
    result = run(candidate("matmul_value_memo"), ext_cache)
    assert result.status == "rejected" and runtime_rules(result)[-1] == "output-replayed", result.messages
    assert "results are being replayed" in result.messages[-1]
    assert result.settings["replay"]["confirmed"] is True


@pytest.mark.slow
def test_an_honest_kernel_whose_first_call_on_new_inputs_waits_is_not_a_replay(ext_cache: Path) -> None:
    # the wait a busy machine adds to a call, made certain: 30 ms of wall time and no work on each input's first call.
    # The probe's CPU clock sees the same work on every call; a wall clock would see a memo's 10x.
    waits = candidate("matmul_naive").replace(
        "        return ext.matmul_naive(a, b)",
        "        import time\n"
        "        seen = self.__dict__.setdefault('seen_inputs', set())\n"
        "        key = tuple(a.flatten()[:8].tolist())\n"
        "        if key not in seen:  # the first call on these inputs\n"
        "            seen.add(key)\n"
        "            time.sleep(0.03)\n"
        "        return ext.matmul_naive(a, b)",
    )
    assert "time.sleep(0.03)" in waits
    result = run(waits, ext_cache, static_guard=False)
    assert result.status == "correct", result.messages
    assert "output-replayed" not in runtime_rules(result)


@pytest.mark.slow
def test_a_kernel_that_returns_one_kept_tensor_once_timing_starts_is_refused_as_replayed(ext_cache: Path) -> None:
    result = run(candidate("matmul_replay_late"), ext_cache)
    assert result.status == "rejected" and runtime_rules(result)[-1] == "output-replayed", result.messages
    assert "returned the same storage as" in result.messages[-1] and "still alive" in result.messages[-1]


class _Same:
    """The evaluator's comparison in miniature: passed when the two tensors are equal."""

    def __init__(self, passed: bool, message: str = "") -> None:
        self.passed, self.message = passed, message


def _compare(expected, got) -> _Same:  # noqa: ANN001
    import torch

    return _Same(bool(torch.equal(expected, got)), "values differ")


def _timed(fn, sets: list, calls: int = 12):  # noqa: ANN001, ANN202
    """The rotation the timing would leave: ``fn`` called round the ``sets``, its kept outputs drawn."""
    from engine.eval.replay import Rotation

    rotation = Rotation(fn, sets, expected_calls=calls)
    for call in range(calls):
        if call == len(sets):
            rotation.sample_from_here()
        rotation()
    return rotation


def _rotation_of(fn, n_sets: int = 3, calls: int = 20):  # noqa: ANN001, ANN202
    import torch

    from engine.eval.replay import Rotation

    sets = [[torch.full((4,), float(i))] for i in range(n_sets)]
    rotation = Rotation(fn, sets, expected_calls=calls)
    for call in range(calls):
        if call == n_sets:  # after the warm-up's round, as the timing stage draws
            rotation.sample_from_here()
        rotation()
    return rotation, [s[0] * 2 for s in sets]


def test_two_timed_calls_are_kept_however_many_the_timing_made() -> None:
    # the timing's budget decides how many calls there are: the random one is drawn among those made
    for calls in (5, 6, 9, 40, 400):
        for _ in range(30):
            rotation, _answers = _rotation_of(lambda x: x * 2, calls=calls)
            kept = [call for call, _which, _out in rotation.samples()]
            assert len(kept) == 2 and kept[-1] == calls - 1 and 3 <= kept[0] < calls - 1, (calls, kept)
    seen = {_rotation_of(lambda x: x * 2, calls=12)[0].samples()[0][0] for _ in range(400)}
    assert seen == set(range(3, 11))  # every timed call but the last can be the drawn one


def test_timed_outputs_kept_from_other_calls_or_other_sets_are_replays() -> None:
    from engine.eval.replay import check_samples

    honest, answers = _rotation_of(lambda x: x * 2)
    assert check_samples(honest, answers, _compare).rule is None

    kept: list = []

    def same_tensor(x):  # noqa: ANN001, ANN202 - one tensor, returned again from call 4 on
        if len(kept) < 4:
            kept.append(x * 2)
        return kept[-1] if len(kept) >= 4 else kept[-1].clone()

    replaying, answers = _rotation_of(same_tensor)
    verdict = check_samples(replaying, answers, _compare)
    assert verdict.rule == "output-replayed" and "same storage" in verdict.message

    def stale_answer(x):  # noqa: ANN001, ANN202 - the answer for set 0, in new memory, from call 3 on
        kept.append(x)
        return (kept[0] * 2).clone() if len(kept) > 3 else x * 2

    kept.clear()
    stale, answers = _rotation_of(stale_answer)
    verdict = check_samples(stale, answers, _compare)
    assert verdict.rule == "output-replayed" and "the answer for set 0" in verdict.message

    off, answers = _rotation_of(lambda x: x * 2 + (0 if x[0] == 0 else 1))
    verdict = check_samples(off, answers, _compare)
    assert verdict.rule is None and verdict.incorrect and verdict.message.endswith("values differ")


class _Kernels:
    """A candidate in miniature whose "own kernel" is a real matmul chain, and the evidence the worker
    gets from the profiler on CUDA: which own kernels one call launched (here, whether it computed)."""

    def __init__(self, memo: bool, slow_first: bool = False) -> None:
        self.memo, self.slow_first = memo, slow_first
        self.kept: dict[bytes, object] = {}
        self.computed = 0

    def own(self, x):  # noqa: ANN001, ANN202
        self.computed += 1
        y = x
        for _ in range(4):
            y = (y @ x) / x.shape[0]
        return y

    def __call__(self, x):  # noqa: ANN001, ANN202
        key = x.numpy().tobytes()[:64]
        if self.memo and key in self.kept:
            return self.kept[key].clone()  # noqa: SLF001 - the lookup
        if self.slow_first and key not in self.kept:
            for _ in range(6):  # an honest first call that prepares more (a plan for a new shape, say)
                self.own(x)
        self.kept[key] = self.own(x)
        return self.kept[key]

    def launches(self, call):  # noqa: ANN001, ANN202
        before = self.computed
        call()
        return ["own_kernel(float const*, float*)"] if self.computed > before else []


def _probe_of(kernels: _Kernels, evidence: bool, seen_ms: tuple[float, float] = (1.0, 1.0)):  # noqa: ANN202
    import torch

    from engine.eval.replay import probe

    reference = _Kernels(memo=False).own
    sets = [[torch.randn(384, 384, generator=torch.Generator().manual_seed(i))] for i in range(2)]
    timed = [[torch.randn(384, 384, generator=torch.Generator().manual_seed(10 + i))] for i in range(3)]

    def close(expected, got) -> _Same:  # noqa: ANN001
        return _Same(bool(torch.allclose(expected, got, rtol=1e-4, atol=1e-4)), "values differ")

    def scripted_clock(call) -> float:  # noqa: ANN001 - the candidate runs; its time is the case's, not the machine's
        call()
        return next(times)

    # the timing-set calls first, then each set's first call: 8x the seen calls, well past the time rule's ratio
    times = iter([*seen_ms, *[8.0] * len(sets)])
    answers = [reference(*inputs) for inputs in timed]
    rotation = _timed(kernels, timed, calls=6)  # the timing's calls on its sets: a memo keeps their answers
    return probe(kernels, reference, sets, scripted_clock, close, rotation, answers, None, kernels.launches if evidence else None)


def test_where_the_binary_tells_a_seen_call_that_launches_no_own_kernel_is_a_replay_and_one_that_does_is_not() -> None:
    from engine.eval.replay import REPLAY_RATIO

    measured, verdict = _probe_of(_Kernels(memo=True), evidence=True)
    assert verdict.rule == "output-replayed" and not verdict.by_time, verdict.message
    assert "launched none of its own kernels" in verdict.message
    assert verdict.figures["seen_call_own_kernels"] == []

    measured, verdict = _probe_of(_Kernels(memo=False, slow_first=True), evidence=True)
    assert all(f > REPLAY_RATIO * s for f, s in zip(measured.fresh_ms, measured.seen_ms, strict=True))
    assert verdict.rule is None, verdict.message  # first calls far slower, but its own kernels ran: no replay
    assert verdict.figures["seen_call_own_kernels"] == ["own_kernel(float const*, float*)"]

    measured, verdict = _probe_of(_Kernels(memo=False, slow_first=True), evidence=False)
    assert verdict.rule == "output-replayed" and verdict.by_time  # without evidence, time alone decides


def test_the_warm_up_verifies_every_set_before_any_call_is_timed() -> None:
    import torch

    from engine.eval.replay import Rotation, check_warmup

    sets = [[torch.full((4,), float(i))] for i in range(3)]
    reference = Rotation(lambda x: x * 2, sets, expected_calls=10)
    candidate = Rotation(lambda x: x * 2 if x[0] < 2 else x * 3, sets, expected_calls=10)
    for _ in range(3):
        reference()
        candidate()
    verdict = check_warmup(candidate, reference, _compare)
    assert verdict.incorrect and "on timing input set 2, before timing" in verdict.message


@pytest.mark.slow
def test_a_candidate_that_survives_its_failed_extension_is_refused_by_its_own_rule(ext_cache: Path) -> None:
    result = run(failing_load(), ext_cache, do_timing=False)
    assert result.status == "rejected" and runtime_rules(result) == ["extension-load-failed"], result.messages
    assert "load_inline failed for 'cf_trust_failing_cpu'" in result.messages[-1]
    assert "caught the error and went on" in result.messages[-1]
    assert "[compiler error at cpp_sources line " in result.messages[-1]  # why it failed, in its own lines
    assert "(RuntimeError: compiler error at " in result.messages[-1]  # each load by its error, not ninja's command


def test_many_failed_loads_are_named_a_few_then_counted_with_the_compilers_first_error() -> None:
    from engine.eval.blame import FAILED_LOADS_SHOWN, failed_loads

    failed = [f"'block_{k}' (RuntimeError: Error building extension)" for k in range(20)]
    text = failed_loads(failed, "compiler error at cuda_sources line 4: class uint3 has no member q")
    assert text.count("Error building extension") == FAILED_LOADS_SHOWN and "and 17 more" in text
    assert text.endswith("[compiler error at cuda_sources line 4: class uint3 has no member q]")
    assert failed_loads(failed[:1], None) == failed[0]


# ---- attribution from the binary ---------------------------------------------------------------------

KERNELS_CU = r"""
__global__ void hardsigmoid_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
namespace { template <typename T> __global__ void scale_kernel(const T* x, T* y, int n) { y[0] = x[0]; } }
extern "C" __global__ void plain_c_kernel(float* y) { y[0] = 1.0f; }
// A host function under a library kernel's name: no kernel stub, so never a kernel of the candidate's.
extern "C" void sm90_fake_gemm_kernel() {}
void launch(const float* x, float* y, long n) {
    hardsigmoid_kernel<<<1, 1>>>(x, y, n);
    scale_kernel<float><<<1, 1>>>(x, y, 1);
    plain_c_kernel<<<1, 1>>>(y);
}
"""

# The names as the PyTorch profiler reports them (CUPTI's names, demangled the GNU way)
OWN = "hardsigmoid_kernel(float const*, float*, long)"
OWN_TEMPLATE = "void (anonymous namespace)::scale_kernel<float>(float const*, float*, int)"
ATEN_LOOKALIKE = "void at::native::(anonymous namespace)::hardsigmoid_kernel<float>(float const*, float*, long)"
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


@pytest.fixture(scope="module", params=["-O0", "-O3"])
def kernels_so(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernels built plain and optimised: at -O3 the host stubs are inlined and only their static
    locals are left in the symbol table (a bf16 template kernel of a Llama was refused on the H200 so)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc here")
    folder = tmp_path_factory.mktemp("binary")
    (folder / "k.cu").write_text(KERNELS_CU)
    command = [nvcc, request.param, "-shared", "-Xcompiler", "-fPIC", "-o", str(folder / "k.so"), str(folder / "k.cu")]
    subprocess.run(command, check=True, timeout=300)
    if request.param == "-O3":  # the case this build exists for: the template's stub inlined, its locals left
        symbols = subprocess.run(["nm", "--defined-only", "-C", str(folder / "k.so")], capture_output=True, text=True).stdout
        stubs = [line.split(maxsplit=2) for line in symbols.splitlines() if "__device_stub__" in line and "scale_kernel" in line]
        assert stubs and all(kind not in "tTwW" for _, kind, _ in stubs), stubs
    return folder / "k.so"


def test_a_kernel_is_own_only_when_its_signature_is_in_the_built_library(kernels_so: Path) -> None:
    from engine.guard.binary import attribute, extension_functions

    functions = extension_functions([kernels_so])
    launched = [OWN, OWN_TEMPLATE, "plain_c_kernel", ATEN_LOOKALIKE, GEMM, "sm90_fake_gemm_kernel"]
    who = attribute(launched, functions, ["hardsigmoid_kernel", "scale_kernel", "plain_c_kernel"])
    assert who.own == [OWN, OWN_TEMPLATE, "plain_c_kernel"]
    assert who.library == [ATEN_LOOKALIKE, GEMM, "sm90_fake_gemm_kernel"]
    assert "sm90_fake_gemm_kernel" in functions.functions  # defined, yet no kernel
    assert who.lookalikes == [ATEN_LOOKALIKE]  # named like the source's kernel: said, never credited
    assert "not compiled into its extensions" in (who.note() or "")


def test_a_borrowed_aten_kernel_gets_no_credit_even_when_the_source_names_it(kernels_so: Path) -> None:
    """The fallback case of the issue: the extension holds its kernel, but only ATen's launched."""
    from engine.guard.binary import attribute, extension_functions
    from engine.guard.share import CUDA_METHOD, classify_kernels, share_record, trivial_share_message

    times = {ATEN_LOOKALIKE: (0.3, 3), GEMM: (0.6, 3)}
    who = attribute(list(times), extension_functions([kernels_so]), ["hardsigmoid_kernel"])
    assert who.own == []
    record = share_record(classify_kernels(times, who.own, calls_per=3), CUDA_METHOD)
    assert record["share"] == 0.0 and trivial_share_message(record) is None  # no own kernel: no-own-kernel's case


def test_a_kernel_the_reference_also_launches_is_credited_to_pytorch(kernels_so: Path) -> None:
    from engine.guard.binary import attribute, extension_functions

    who = attribute([OWN, GEMM], extension_functions([kernels_so]), ["hardsigmoid_kernel"], reference_launched=[OWN])
    assert who.own == [] and who.shared_with_reference == [OWN]
    assert "also launched by the reference" in (who.note() or "")


def test_an_unreadable_library_says_attribution_is_unavailable(tmp_path: Path) -> None:
    from engine.guard.binary import AttributionUnavailable, defined_functions

    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not an ELF file")
    with pytest.raises(AttributionUnavailable, match="junk.so"):
        defined_functions(junk)


# ---- L2 persistence -----------------------------------------------------------------------------------

L2_CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void copy_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
torch::Tensor run(torch::Tensor x) {
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 4 << 20);
    cudaStreamAttrValue attr;
    attr.accessPolicyWindow.base_ptr = x.data_ptr();
    attr.accessPolicyWindow.num_bytes = x.numel() * sizeof(float);
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(0, cudaStreamAttributeAccessPolicyWindow, &attr);
    auto y = torch::empty_like(x);
    copy_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""
ext = load_inline(name="l2", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=cuda_source, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
'''


def test_the_static_guard_names_l2_persistence_warns_by_default_and_refuses_under_strict() -> None:
    from engine.guard.static import check_source

    default = [f for f in check_source(L2_CANDIDATE, policy="default") if f.rule == "l2-persistence"]
    strict = [f for f in check_source(L2_CANDIDATE, policy="strict") if f.rule == "l2-persistence"]
    assert default and {f.severity for f in default} == {"warn"}
    assert strict and {f.severity for f in strict} == {"refuse"}
    assert "cudaLimitPersistingL2CacheSize" in " ".join(f.message for f in default)


class _Driver:
    """The three driver entry points engine.eval.l2 calls, kept in Python: the real ones need a GPU
    (tests/test_trust_gpu.py runs them on the H200). Same signatures and return codes as cuda.h's."""

    def __init__(self) -> None:
        self.value = 0
        self.resets = 0

    def cuCtxGetLimit(self, pointer: object, limit: int) -> int:  # noqa: N802 - the driver's name
        assert limit == 0x06
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_size_t)).contents.value = self.value
        return 0

    def cuCtxSetLimit(self, limit: int, value: ctypes.c_size_t) -> int:  # noqa: N802
        self.value = value.value
        return 0

    def cuCtxResetPersistingL2Cache(self) -> int:  # noqa: N802
        self.resets += 1
        return 0


def test_a_changed_persisting_limit_is_put_back_and_its_lines_reset_before_each_timed_call() -> None:
    from engine.eval.l2 import PersistingL2

    driver = _Driver()
    l2 = PersistingL2(driver)
    assert l2.available and l2.baseline == 0 and not l2.restore() and l2.message() is None
    driver.value = 4 << 20  # what the candidate set
    assert l2.restore() and driver.value == 0 and driver.resets == 1
    assert not l2.restore()  # nothing changed since
    driver.value = 8 << 20
    l2.restore()
    message = l2.message() or ""
    assert l2.restores == 2 and "4194304 bytes, 8388608 bytes" in message and "put back" in message


INPLACE_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        x.mul_(2)  # changes its input, not to the same result twice
        return x.sum(0)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''

INPLACE_CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x.sum(0)
'''


@pytest.mark.slow
def test_an_honest_kernel_for_a_reference_that_changes_its_inputs_is_timed_and_stays_correct(tmp_path: Path) -> None:
    options = EvalOptions(device="cpu", cache_root=tmp_path, static_guard=False, timing=TimingPlan(min_trials=20, budget_s=10.0))
    result = evaluate(INPLACE_TASK, INPLACE_CANDIDATE, options, task_name="inplace")
    assert result.status == "correct", result.messages
    assert result.settings["replay"]["timed_calls_checked"] == 0  # the inputs' state is not known then


def test_a_restore_the_driver_refuses_is_said() -> None:
    from engine.eval.l2 import PersistingL2

    driver = _Driver()
    l2 = PersistingL2(driver)
    driver.cuCtxResetPersistingL2Cache = lambda: 1  # type: ignore[method-assign]  # CUDA_ERROR_INVALID_VALUE
    driver.value = 4 << 20
    assert l2.restore() and l2.failures == 1
    assert "the driver refused 1 of those restores" in (l2.message() or "")


class _LateMemo:
    """A memo that computes on the first two calls for an input, then replays it: one repeat is not enough
    to see it."""

    def __init__(self, replays: bool = True) -> None:
        self.replays = replays
        self.seen: dict[bytes, list] = {}

    def __call__(self, x):  # noqa: ANN001, ANN202
        key = x.numpy().tobytes()[:64]
        calls = self.seen.setdefault(key, [])
        if self.replays and len(calls) >= 2:
            return calls[-1].clone()
        y = x
        for _ in range(4):
            y = (y @ x) / x.shape[0]
        calls.append(y)
        return y


def _probe_cpu_clock(candidate):  # noqa: ANN001, ANN202 - the timing's calls, then the probe, on the CPU clock
    import torch

    from engine.eval.replay import probe
    from engine.eval.timing import make_timer

    def inputs(seed: int) -> list:
        return [torch.randn(384, 384, generator=torch.Generator().manual_seed(seed))]

    sets, timed = [inputs(i) for i in range(2)], [inputs(10 + i) for i in range(3)]
    close = lambda e, g: _Same(bool(torch.allclose(e, g, rtol=1e-4, atol=1e-4)), "values differ")  # noqa: E731
    reference = _LateMemo(replays=False)
    # one thread, as the worker runs a CPU evaluation (cpu_threads): the process's clock would otherwise also
    # count torch's other threads spinning after the flush (CI measured a lookup at 1.3 ms that way)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rotation = _timed(candidate, timed)  # the timing's calls: each of its sets called several times
        answers = [reference(*timed_set) for timed_set in timed]
        return probe(candidate, reference, sets, make_timer(torch.device("cpu")).busy_time_once, close, rotation, answers)
    finally:
        torch.set_num_threads(threads)


def test_a_memo_that_waits_for_repeats_before_it_replays_is_seen_on_the_timings_sets() -> None:
    _, verdict = _probe_cpu_clock(_LateMemo(replays=True))
    assert verdict.rule == "output-replayed" and verdict.by_time, verdict.message
    _, verdict = _probe_cpu_clock(_LateMemo(replays=False))  # the same work every call: no replay
    assert verdict.rule is None, verdict.message


class _SmallMemo:
    """A memo of ``capacity`` answers keyed by the input's values: enough for the timing's whole rotation.
    ``lru``: the least recently used is pushed out, else the oldest kept (a review of session 22 found the
    oldest-first one passing a probe whose seen calls came after its new inputs)."""

    def __init__(self, capacity: int = 3, lru: bool = False) -> None:
        self.capacity, self.lru = capacity, lru
        self.kept: dict[bytes, object] = {}

    def __call__(self, x):  # noqa: ANN001, ANN202
        key = x.numpy().tobytes()[:64]
        if key in self.kept:
            if self.lru:
                self.kept[key] = self.kept.pop(key)
            return self.kept[key].clone()
        y = x
        for _ in range(4):
            y = (y @ x) / x.shape[0]
        self.kept[key] = y
        if len(self.kept) > self.capacity:
            del self.kept[next(iter(self.kept))]
        return y


@pytest.mark.parametrize("lru", [False, True], ids=["oldest-out", "least-recent-out"])
def test_a_memo_just_big_enough_for_the_timings_sets_is_refused(lru: bool) -> None:
    measured, verdict = _probe_cpu_clock(_SmallMemo(capacity=3, lru=lru))
    assert verdict.rule == "output-replayed" and verdict.by_time, (verdict.message, measured.figures())


def test_one_seen_call_slowed_by_a_busy_machine_does_not_hide_a_replay() -> None:
    import torch

    from engine.eval.replay import probe

    # the timing-set calls (the first one preempted), then each set's first call
    times = iter([9.0, 1.0, 8.0, 8.0])

    def clock(call) -> float:  # noqa: ANN001
        call()
        return next(times)

    sets = [[torch.randn(384, 384, generator=torch.Generator().manual_seed(i))] for i in range(2)]
    timed = [[torch.randn(384, 384, generator=torch.Generator().manual_seed(10 + i))] for i in range(3)]
    close = lambda e, g: _Same(bool(torch.allclose(e, g, rtol=1e-4, atol=1e-4)), "values differ")  # noqa: E731
    memo = _Kernels(memo=True)
    answers = [_Kernels(memo=False).own(*timed_set) for timed_set in timed]
    measured, verdict = probe(memo, _Kernels(memo=False).own, sets, clock, close, _timed(memo, timed, calls=6), answers)
    assert measured.seen_ms == [9.0, 1.0] and verdict.rule == "output-replayed" and verdict.by_time


def test_a_seen_call_that_returns_another_timing_sets_answer_is_a_replay() -> None:
    import torch

    from engine.eval.replay import probe

    timed = [[torch.full((4,), float(10 + i))] for i in range(3)]
    answers = [t[0] * 2 for t in timed]
    stale = lambda x: answers[1].clone() if float(x[0]) == 10.0 else x * 2  # noqa: E731 - set 1's answer for set 0
    sets = [[torch.full((4,), float(i))] for i in range(2)]
    same = lambda e, g: _Same(bool(torch.equal(e, g)), "values differ")  # noqa: E731

    def clock(call) -> float:  # noqa: ANN001
        call()
        return 1.0

    rotation = _timed(lambda x: x * 2, timed)  # honest while timed
    _, verdict = probe(stale, lambda x: x * 2, sets, clock, same, rotation, answers)
    assert verdict.rule == "output-replayed" and "a call on timing set 0" in verdict.message
    assert "the answer for timing set 1" in verdict.message
    _, verdict = probe(stale, lambda x: x * 2, sets, clock, same, rotation, None)  # answers not known: not compared
    assert verdict.rule is None


def test_a_seen_call_that_hands_back_the_storage_its_timed_call_returned_is_a_replay() -> None:
    import torch

    from engine.eval.replay import probe

    timed = [[torch.full((4,), float(10 + i))] for i in range(3)]
    kept: dict[int, torch.Tensor] = {}
    after_timing = [False]

    def by_pointer(x):  # noqa: ANN001, ANN202 - each input's first answer kept by its pointer, handed back after timing
        if after_timing[0] and x.data_ptr() in kept:
            return kept[x.data_ptr()]
        out = x * 2
        kept.setdefault(x.data_ptr(), out)
        return out

    rotation = _timed(by_pointer, timed)
    after_timing[0] = True
    sets = [[torch.full((4,), float(i))] for i in range(2)]
    same = lambda e, g: _Same(bool(torch.equal(e, g)), "values differ")  # noqa: E731
    _, verdict = probe(by_pointer, lambda x: x * 2, sets, lambda call: call() or 1.0, same, rotation, [t[0] * 2 for t in timed])
    assert verdict.rule == "output-replayed" and "same storage as the warm-up call on input set 0" in verdict.message


def test_the_probe_lets_each_sets_outputs_go_before_the_next_sets_calls() -> None:
    """The timing's calls let their outputs go; a probe that kept every output alive made each next call
    allocate new memory inside its timed span, which read an honest first call as slow."""
    import weakref

    import torch

    from engine.eval.replay import probe

    made: list[weakref.ref] = []
    alive_at_call: list[int] = []

    def honest(x):  # noqa: ANN001, ANN202
        alive_at_call.append(sum(ref() is not None for ref in made))
        out = x * 2
        made.append(weakref.ref(out))
        return out

    timed = [[torch.full((4,), float(10 + i))] for i in range(3)]
    rotation = _timed(lambda x: x * 2, timed)
    sets = [[torch.full((4,), float(i))] for i in range(2)]
    same = lambda e, g: _Same(bool(torch.equal(e, g)), "values differ")  # noqa: E731
    _, verdict = probe(honest, lambda x: x * 2, sets, lambda call: call() or 1.0, same, rotation, [t[0] * 2 for t in timed])
    assert verdict.rule is None and not verdict.incorrect, verdict.message
    assert alive_at_call == [0, 0, 0, 0]  # each call alone: no earlier call's output kept


def test_the_profiler_is_asked_only_where_seen_calls_are_faster_by_a_margin_a_memo_could_gain() -> None:
    """A µs kernel's jitter crosses the ratio: profiling it would cost seconds where the profiler is cold."""
    import torch

    from engine.eval.replay import REPLAY_MIN_GAP_MS, probe

    def timed(fresh_ms: float, seen_ms: float):  # noqa: ANN202 - the timing-set calls, then each set's first call
        times = iter([seen_ms] * 2 + [fresh_ms] * 2)

        def time_once(call) -> float:  # noqa: ANN001
            call()
            return next(times)

        return time_once

    asked: list[int] = []

    def own_launches(call):  # noqa: ANN001, ANN202
        asked.append(1)
        call()
        return ["own_kernel(float const*, float*)"]

    sets = [[torch.full((4,), float(i))] for i in range(2)]
    same = lambda e, g: _Same(bool(torch.equal(e, g)))  # noqa: E731
    gap = REPLAY_MIN_GAP_MS
    rotation = _timed(lambda x: x * 2, sets)
    probe(lambda x: x * 2, lambda x: x * 2, sets, timed(gap * 0.9, gap * 0.3), same, rotation, None, None, own_launches)
    assert asked == []  # 3x apart, but by less than the gap: not looked at
    _, verdict = probe(lambda x: x * 2, lambda x: x * 2, sets, timed(gap * 4, gap), same, rotation, None, None, own_launches)
    assert asked == [1] and verdict.rule is None  # looked at once; its own kernels ran


def test_a_fresh_call_far_slower_than_the_timings_credited_call_is_looked_at_in_the_binary() -> None:
    """On the H100 a value-keyed memo's seen probe calls were only 1.35x faster than its fresh ones (its
    lookup syncs the host), while the timing credited it twice an honest kernel's speed: the timing's
    median is what a replay gains, so a fresh call far slower than it has a seen call looked at in the
    binary too. Only looked at: an honest kernel with the same times passes."""
    import torch

    from engine.eval.replay import REPLAY_MIN_GAP_MS, SUSPECT_RATIO, probe

    sets = [[torch.randn(8, 8, generator=torch.Generator().manual_seed(i))] for i in range(2)]
    timed = [[torch.randn(8, 8, generator=torch.Generator().manual_seed(10 + i))] for i in range(3)]
    fresh = REPLAY_MIN_GAP_MS * 8
    seen = fresh / (SUSPECT_RATIO * 0.9)  # seen calls close to fresh ones: not suspect by them alone
    credited = fresh / (SUSPECT_RATIO * 2)  # the timing's median, far under the fresh calls
    same = lambda e, g: _Same(bool(torch.allclose(e, g)), "values differ")  # noqa: E731

    def probed(memo: bool, timed_ms: float):  # noqa: ANN202 - a new candidate, timed, then probed
        kernels = _Kernels(memo=memo)
        times = iter([seen] * 2 + [fresh] * 2)  # the seen calls first, then each set's first call

        def clock(call) -> float:  # noqa: ANN001
            call()
            return next(times)

        rotation = _timed(kernels, timed)
        return probe(kernels, _Kernels(memo=False).own, sets, clock, same, rotation, None, None, kernels.launches, timed_ms=timed_ms)[1]

    verdict = probed(memo=True, timed_ms=seen)
    assert verdict.rule is None and "seen_call_own_kernels" not in verdict.figures, verdict.message  # not looked at
    verdict = probed(memo=True, timed_ms=credited)
    assert verdict.rule == "output-replayed" and verdict.figures["seen_call_own_kernels"] == [], verdict.message
    assert verdict.figures["timed_median_ms"] == credited
    assert f"the timing credited it {credited:.4f} ms a call" in verdict.message
    verdict = probed(memo=False, timed_ms=credited)  # its own kernels ran on the seen call: not a replay
    assert verdict.rule is None and verdict.figures["seen_call_own_kernels"] == ["own_kernel(float const*, float*)"]


def test_where_the_ablation_stage_will_tell_the_probe_defers_and_refuses_nothing_by_time() -> None:
    import torch

    from engine.eval.replay import DEFERRED, REPLAY_RATIO

    kernels = _Kernels(memo=False, slow_first=True)
    measured, verdict = _probe_of(kernels, evidence=False)
    assert verdict.by_time  # slow first calls, no evidence: time decides
    kernels = _Kernels(memo=False, slow_first=True)
    kernels.launches = lambda call: DEFERRED  # type: ignore[method-assign]
    measured, verdict = _probe_of(kernels, evidence=True)
    assert all(f > REPLAY_RATIO * s for f, s in zip(measured.fresh_ms, measured.seen_ms, strict=True))
    assert verdict.deferred and verdict.rule is None and verdict.figures["decided_by"] == "ablation"
    # the ablation is handed the tensors of the timing set whose seen call took least: where a cache answered
    kernels = _Kernels(memo=False, slow_first=True)
    kernels.launches = lambda call: DEFERRED  # type: ignore[method-assign]
    _, verdict = _probe_of(kernels, evidence=True, seen_ms=(1.5, 1.0))
    timed_set_1 = torch.randn(384, 384, generator=torch.Generator().manual_seed(11))  # as _probe_of makes it
    assert verdict.deferred and torch.equal(verdict.suspect[0], timed_set_1)
