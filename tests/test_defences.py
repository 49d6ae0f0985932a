"""The adversarial defences' parts, in-process (issue 25; ARCHITECTURE.md §3, "Defences").

The worker-level journeys (a candidate evaluated end to end) are in test_defences_cpu.py and
test_defences_gpu.py; these tests pin the decisions each part makes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.eval import degenerate, shapes
from engine.eval.precision import PrecisionPin
from engine.eval.stale import CPU_COPIES, CPU_HEAP_LIMIT, byte_sizes, poison_free_memory
from engine.eval.tolerances import DEFAULT_TOLERANCES
from engine.guard.native import scan_native
from engine.tasks import import_module_from_source

FIXTURES = Path(__file__).parent / "fixtures" / "defences"


def _task(name: str):  # noqa: ANN202
    path = FIXTURES / f"{name}.py"
    return import_module_from_source(path.read_text(), str(path))


# -- weak outputs -------------------------------------------------------------------------------
def test_a_softmax_of_many_elements_is_weak_for_zeros_and_constants_and_a_relu_is_not() -> None:
    torch.manual_seed(0)
    x = torch.rand(4, 65536)
    weak = degenerate.weak_outputs(torch.softmax(x, dim=1), [x], DEFAULT_TOLERANCES)
    assert weak == [{"output": "output", "passes": ["zeros", "constant"], "checks": ["spread"]}]
    y = torch.randn(64, 256)
    assert degenerate.weak_outputs(torch.relu(y), [y], DEFAULT_TOLERANCES) == []


def test_an_output_within_tolerance_of_its_input_is_weak_for_the_input_and_judged_against_it() -> None:
    x = torch.randn(16, 1024)
    weak = degenerate.weak_outputs(x + 1e-5 * torch.tanh(x), [x], DEFAULT_TOLERANCES)
    assert weak == [{"output": "output", "passes": ["input[0]"], "checks": ["input[0]"]}]


def test_nested_outputs_are_named_as_compare_names_them_and_integers_are_never_weak() -> None:
    x = torch.rand(4, 65536)
    small = torch.softmax(x, dim=1)
    weak = degenerate.weak_outputs((torch.randn(3) + 5, {"p": small}, torch.zeros(5, dtype=torch.int64)), [x], {})
    assert [w["output"] for w in weak] == ["output[1]['p']"]


def test_a_spread_below_the_dtypes_resolution_gets_no_added_check() -> None:
    """fp16 values 1 + 1e-5·noise: the constant passes, but no kernel could follow the noise in fp16."""
    x = (1 + 1e-5 * torch.randn(256, 256)).half()
    weak = degenerate.weak_outputs(x * 1, [], DEFAULT_TOLERANCES)
    assert weak and weak[0]["checks"] == [] and "constant" in weak[0]["passes"]
    assert "no added check" in degenerate.describe_weak(weak)


def test_merged_records_keep_every_answer_that_passed_and_only_checks_every_call_allowed() -> None:
    a = [{"output": "output", "passes": ["zeros"], "checks": ["spread"]}]
    b = [{"output": "output", "passes": ["constant"], "checks": []}]
    assert degenerate.merge_weak([a, b]) == [{"output": "output", "passes": ["zeros", "constant"], "checks": []}]


# -- degenerate answers and the spread check --------------------------------------------------------
def test_degenerate_kinds_are_named_only_where_the_reference_differs() -> None:
    x = torch.randn(8, 8)
    ref = torch.softmax(x, dim=1)
    assert degenerate.degenerate_kind(torch.zeros_like(ref), ref, [x]) == "zeros"
    assert degenerate.degenerate_kind(torch.full_like(ref, 0.125), ref, [x]) == "constant"
    assert degenerate.degenerate_kind(x.clone(), ref, [x]) == "input[0]"
    assert degenerate.degenerate_kind(ref.clone(), ref, [x]) is None
    zero_ref = torch.zeros(8, 8)  # a reference that is itself zeros: answering zeros is right
    assert degenerate.degenerate_kind(torch.zeros(8, 8), zero_ref, [x]) is None



def test_an_answer_equal_to_a_constant_or_identity_reference_is_not_degenerate() -> None:
    """A constant or an input returned is the right answer where the reference gives that too."""
    x = torch.randn(8, 8)
    flat = torch.full((8, 8), 0.125)
    assert degenerate.degenerate_kind(flat.clone(), flat, [x]) is None
    assert degenerate.degenerate_kind(x.clone(), x.clone(), [x]) is None  # an identity task


def _weak_softmax() -> tuple[torch.Tensor, torch.Tensor, list[dict]]:
    torch.manual_seed(0)
    x = torch.rand(4, 65536)
    expected = torch.softmax(x, dim=1)  # ~1.5e-5 each, under fp32's atol: zeros pass the value check
    return x, expected, degenerate.weak_outputs(expected, [x], DEFAULT_TOLERANCES)


def test_the_call_after_the_reference_and_a_nested_output_are_checked_for_degenerate_answers() -> None:
    x, expected, weak = _weak_softmax()
    zeros = torch.zeros_like(expected)
    assert degenerate.first_degenerate(weak, expected, [expected.clone(), zeros], [x]) == ("output", "zeros")
    y = torch.randn(8, 8)
    nested = (torch.relu(y), expected)
    nested_weak = degenerate.weak_outputs(nested, [x], DEFAULT_TOLERANCES)
    found = degenerate.first_degenerate(nested_weak, nested, [(torch.relu(y), zeros)], [x])
    assert found == ("output[1]", "zeros")


def test_a_single_calls_weak_failure_names_zeros_degenerate_and_a_far_off_answer_failing() -> None:
    """Answers inside the tolerance and wrong by far more than rounding: all zeros, and halfway to the
    mean (half the reference's spread off); the honest answer passes."""
    x, expected, weak = _weak_softmax()
    assert degenerate.weak_failure(weak, expected, torch.zeros_like(expected), [x]) == "output is degenerate (zeros)"
    halfway = 0.5 * (expected + 1 / 65536)
    assert degenerate.weak_failure(weak, expected, halfway, [x]) == "output fails the weak-output check"
    assert degenerate.weak_failure(weak, expected, expected.clone(), [x]) == ""

def _spread_of(reference_and_candidate) -> list[dict]:  # noqa: ANN001
    check = degenerate.SpreadCheck({"output": ["spread"]})
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.rand(4, 4096)
        expected = torch.softmax(x, dim=1)
        check.add(expected, reference_and_candidate(expected), [x])
    return check.failures()


def test_the_spread_check_passes_an_honest_answer_and_fails_a_halfway_and_a_constant_one() -> None:
    assert _spread_of(lambda e: e * (1 + 1e-6)) == []
    halfway = _spread_of(lambda e: 0.5 * (e + 1 / 4096))
    assert len(halfway) == 1 and halfway[0]["relative_error"] == pytest.approx(0.5, rel=1e-3)
    constant = _spread_of(lambda e: torch.full_like(e, 1 / 4096))
    assert constant[0]["relative_error"] >= 1 - 1e-6 and constant[0]["constant_across_trials"]


def test_a_scalar_is_judged_by_how_it_follows_its_inputs_across_trials() -> None:
    check = degenerate.SpreadCheck({"output": ["spread"]})
    honest = degenerate.SpreadCheck({"output": ["spread"]})
    for seed in range(5):
        torch.manual_seed(seed)
        x = torch.randn(16, 64)
        expected = (x * 1e-5).mean()
        check.add(expected, torch.zeros(()), [x])
        honest.add(expected, expected.clone(), [x])
    assert honest.failures() == []
    (failure,) = check.failures()
    assert failure["constant_across_trials"] and failure["relative_error"] >= 1


def test_the_input_check_fails_an_answer_that_stays_at_the_input() -> None:
    check = degenerate.SpreadCheck({"output": ["input[0]"]})
    for seed in range(2):
        torch.manual_seed(seed)
        x = torch.randn(16, 256)
        expected = x + 1e-5 * torch.tanh(x)
        check.add(expected, x + 1e-7 * torch.tanh(x), [x])  # 1 % of the real residual
    (failure,) = check.failures()
    assert failure["check"] == "input[0]" and failure["relative_error"] == pytest.approx(0.99, rel=1e-2)


# -- stale memory -------------------------------------------------------------------------------
def test_the_cpu_fill_counts_every_copy_and_sizes_nested_outputs() -> None:
    """Whether the fill reaches the next allocation is tests/test_hostheap.py's, in a process set up as a
    CPU worker is (here xdist's own threads share the heap)."""
    size = 64 * 1024
    assert poison_free_memory(torch.device("cpu"), [size]) == CPU_COPIES * size  # several chunks each
    huge = CPU_HEAP_LIMIT * 2  # beyond glibc's heap: freed to the kernel anyway, so one chunk
    assert poison_free_memory(torch.device("cpu"), [huge]) == huge
    assert byte_sizes((torch.ones(3), [torch.ones(2, dtype=torch.float64)], {"a": torch.ones(1)})) == [12, 16, 4]


# -- precision flags ----------------------------------------------------------------------------
def test_a_changed_flag_is_named_put_back_and_not_named_again() -> None:
    pin = PrecisionPin()
    assert pin.pinned["torch.backends.cuda.matmul.allow_tf32"] is False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = not pin.pinned["torch.backends.cudnn.benchmark"]
    changes = pin.changed()
    assert any(c.startswith("torch.backends.cuda.matmul.allow_tf32: False -> True") for c in changes)
    assert any(c.startswith("torch.backends.cudnn.benchmark") for c in changes)
    assert torch.backends.cuda.matmul.allow_tf32 is False and pin.changed() == []


def test_a_lowered_matmul_precision_is_seen_through_either_api() -> None:
    pin = PrecisionPin()
    torch.set_float32_matmul_precision("medium")
    assert any("float32_matmul_precision" in c or "fp32_precision" in c for c in pin.changed())
    assert torch.get_float32_matmul_precision() == "highest" and pin.changed() == []



def test_the_reduced_precision_reduction_flags_are_named_and_put_back() -> None:
    pin = PrecisionPin()
    matmul = torch.backends.cuda.matmul
    for kind in ("fp16", "bf16"):
        flag = f"allow_{kind}_reduced_precision_reduction"
        before = getattr(matmul, flag)
        setattr(matmul, flag, not before)
        (change,) = pin.changed()
        assert change.startswith(f"torch.backends.cuda.matmul.{flag}: ")
        assert getattr(matmul, flag) == before and pin.changed() == []


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("torch.backends", "torch.backends.fp32_precision"),  # every op's "none" falls back to it
        ("torch.backends.cuda.matmul", "torch.backends.cuda.matmul.fp32_precision"),
        ("torch.backends.cudnn.conv", "torch.backends.cudnn.conv.fp32_precision"),
        ("torch.backends.mkldnn.conv", "torch.backends.mkldnn.conv.fp32_precision"),  # no legacy flag sees it
    ],
)
def test_a_new_api_precision_is_named_with_the_value_set_and_put_back(where: str, name: str) -> None:
    import importlib

    *module, last = where.split(".")
    holder = getattr(importlib.import_module(".".join(module)), last)
    pin = PrecisionPin()
    holder.fp32_precision = "tf32" if pin.pinned[name] != "tf32" else "ieee"
    set_to = holder.fp32_precision
    assert f"{name}: {pin.pinned[name]!r} -> {set_to!r}" in pin.changed()
    assert pin.changed() == [] and PrecisionPin().pinned == pin.pinned  # every flag as it was


def test_a_flag_torch_refuses_to_read_is_named_unreadable_and_readable_once_put_back() -> None:
    pin = PrecisionPin()
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # then torch refuses to read the legacy allow_tf32
    changes = pin.changed()
    assert any(c.startswith("torch.backends.cuda.matmul.allow_tf32: False -> 'unreadable (") for c in changes)
    assert torch.backends.cuda.matmul.allow_tf32 is False

def test_the_native_scan_names_the_aten_and_cublas_switches_and_cudaforges_generated_names() -> None:
    source = """
    void f() {
        at::globalContext().setAllowTF32CuBLAS(true);
        at::globalContext().setFloat32MatmulPrecision("medium");
        cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);
        cf_ablate_own_kernels(0);
    }
    // setAllowTF32CuDNN(true) in a comment is not a call
    """
    rules = [(hit.rule, hit.message.split("(")[1].split(")")[0]) for hit in scan_native(source)]
    assert ("torch-global-state", "setAllowTF32CuBLAS") in rules
    assert ("torch-global-state", "setFloat32MatmulPrecision") in rules
    assert ("torch-global-state", "cublasSetMathMode") in rules
    assert ("runtime-tampering", "cf_ablate_own_kernels") in rules
    assert not any("CuDNN" in name for _, name in rules)


# -- shapes -------------------------------------------------------------------------------------
def test_only_sizes_get_inputs_alone_reads_are_perturbed() -> None:
    assert shapes.perturbable_sizes(_task("softmax_rows")) == {"batch_size": 8, "dim": 512}
    source = (
        "import torch\nimport torch.nn as nn\nfeatures = 64\nbatch = 32\nscale = 3\n"
        "class Model(nn.Module):\n    def __init__(self, f):\n        super().__init__()\n"
        "        self.l = nn.Linear(f, f)\n    def forward(self, x):\n        return self.l(x) * scale\n"
        "def get_inputs():\n    return [torch.randn(batch, features) * scale]\n"
        "def get_init_inputs():\n    return [features]\n"
    )
    task = import_module_from_source(source, "linear_task.py")
    assert shapes.perturbable_sizes(task) == {"batch": 32}  # features: the model's; scale: forward reads it


def test_variants_are_half_odd_and_odd_half_without_repeats_and_sizes_come_back() -> None:
    assert shapes.variants({"n": 512, "m": 3}) == [
        ("half", {"n": 256, "m": 1}),
        ("odd", {"n": 511, "m": 3}),
        ("odd-half", {"n": 255, "m": 1}),
    ]
    assert shapes.variants({"n": 2}) == [("half", {"n": 1})]  # odd-half is the same
    task = _task("softmax_rows")
    with shapes.SizesSet(task, {"dim": 7}):
        assert task.get_inputs()[0].shape == (8, 7)
    assert task.get_inputs()[0].shape == (8, 512)


def test_the_summary_counts_only_shapes_that_were_checked() -> None:
    record = {
        "variants": [
            {"status": "correct"},
            {"status": "incorrect"},
            {"status": "skipped", "message": "the reference does not accept it"},
        ]
    }
    assert shapes.summary(record) == "correct at 1/2 other shapes"
    assert shapes.summary({"variants": [], "note": "no sizes"}) == "shapes: no sizes"
    assert shapes.summary(None) == ""


def test_an_output_that_barely_depends_on_its_inputs_is_recorded_as_weak_without_a_check() -> None:
    torch.manual_seed(0)
    base = torch.randn(8, 10)
    first, second = base + 1e-6 * torch.randn(8, 10), base + 1e-6 * torch.randn(8, 10)
    blind = degenerate.input_blind_outputs(first, second, DEFAULT_TOLERANCES)
    assert blind == [{"output": "output", "passes": ["other-inputs"], "checks": []}]
    assert degenerate.input_blind_outputs(first, torch.randn(8, 10), DEFAULT_TOLERANCES) == []
    # the same answer for other inputs: the output does not depend on them, so ignoring them is right
    assert degenerate.input_blind_outputs(first, first.clone(), DEFAULT_TOLERANCES) == []
    spread = [{"output": "output", "passes": ["zeros"], "checks": ["spread"]}]
    merged = degenerate.merge_weak([spread, blind])  # zeros already pass: other-inputs adds nothing
    assert merged == [{"output": "output", "passes": ["zeros"], "checks": ["spread"]}]
    assert degenerate.merge_weak([blind, blind]) == blind
