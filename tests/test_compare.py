"""``engine/eval/compare.py`` on its own: what passes, what fails, and what a failure says.

Every case is data (``CASES``) checked by one function, ``check``, so the same cases can be run
against mutated copies of compare.py: ``test_every_mutation_of_compare_is_killed`` applies each
plausible bug (``MUTATIONS``: one search/replace on the source, asserted to apply exactly once),
imports the copy under another name and requires the cases named for it to fail. A mutation no case
notices is a hole in these tests.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from engine.eval import compare
from engine.eval.tolerances import DEFAULT_TOLERANCES

NAN, INF = float("nan"), float("inf")
SOURCE = Path(compare.__file__)


@dataclass(frozen=True)
class Case:
    """``compare_outputs(ref, cand, tolerances)`` must pass (or fail, with ``says`` in its message)."""

    id: str
    ref: Any
    cand: Any
    passes: bool
    says: tuple[str, ...] = ()
    tolerances: dict[str, float] | None = None
    max_abs: float | None = None  # the max abs error a passing comparison reports


def t(values: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


F32, F16 = DEFAULT_TOLERANCES["float32"], DEFAULT_TOLERANCES["float16"]
# fp16 values near 1 are 2**-10 apart; the fp16 bound at 1.0 is atol + rtol·1 = 2e-2 (20.48 steps).
STEP16 = 2.0**-10
_grid = torch.zeros(3, 4)
_two_bad = _grid.clone()
_two_bad[1, 2], _two_bad[2, 3] = 1.0, 1.0

_large = torch.zeros(5 * compare.BARE_SAMPLE)


def _large_bad_at(index: int) -> torch.Tensor:
    bad = _large.clone()
    bad[index] = 1.0
    return bad


CASES: list[Case] = [
    # equal outputs of every kind pass
    Case("equal-fp32", t([1.0, -2.0, 3.5]), t([1.0, -2.0, 3.5]), True, max_abs=0.0),
    Case(
        "equal-nested",
        {"a": (t([1.0]), [t([2.0]), 3]), "b": 4.0},
        {"a": (t([1.0]), [t([2.0]), 3]), "b": 4.0},
        True,
    ),
    Case("equal-int64", t([1, 2, 3], torch.int64), t([1, 2, 3], torch.int64), True),
    Case("equal-bool", t([True, False], torch.bool), t([True, False], torch.bool), True),
    Case("empty", torch.zeros(0), torch.zeros(0), True),
    Case("empty-2d", torch.zeros(0, 4), torch.zeros(0, 4), True),
    Case("none", None, None, True),
    # NaN and Inf in the candidate never pass, wherever they are
    Case(
        "nan",
        t([1.0, 2.0, 3.0]),
        t([1.0, NAN, 3.0]),
        False,
        ("non-finite", "index (1,)", "NaN and Inf never pass"),
    ),
    Case("inf", t([1.0, 2.0]), t([INF, 2.0]), False, ("non-finite", "index (0,)", "NaN and Inf never pass")),
    Case(
        "-inf", t([1.0, 2.0]), t([1.0, -INF]), False, ("non-finite", "index (1,)", "NaN and Inf never pass")
    ),
    Case("nan-fp16", t([1.0, 2.0], torch.float16), t([1.0, NAN], torch.float16), False, ("non-finite",)),
    Case(
        "nan-in-second-of-tuple",
        (t([1.0]), t([2.0, 3.0])),
        (t([1.0]), t([2.0, NAN])),
        False,
        ("output[1]", "non-finite"),
    ),
    Case(
        "nan-deep-in-dict",
        {"x": [t([1.0]), (t([2.0]),)]},
        {"x": [t([1.0]), (t([NAN]),)]},
        False,
        ("output['x'][1][0]",),
    ),
    Case("inf-both", t([INF]), t([INF]), False),
    # a non-finite reference cannot be matched (the reference check relies on this to call a task broken)
    Case("nan-in-reference", t([1.0, NAN]), t([1.0, 2.0]), False, ("index (1,)",)),
    Case("nan-in-both", t([NAN]), t([NAN]), False),
    Case("inf-in-reference", t([INF]), t([1e30]), False),
    # dtype, shape and structure must be the reference's
    Case(
        "dtype-fp64-for-fp32",
        t([1.0, 2.0]),
        t([1.0, 2.0], torch.float64),
        False,
        ("dtype float64", "float32"),
    ),
    Case("dtype-fp16-for-fp32", t([1.0, 2.0]), t([1.0, 2.0], torch.float16), False, ("dtype float16",)),
    Case("dtype-int-for-float", t([1.0, 2.0]), t([1, 2], torch.int64), False, ("dtype int64",)),
    Case("dtype-int32-for-int64", t([1, 2], torch.int64), t([1, 2], torch.int32), False, ("dtype int32",)),
    Case("shape-broadcast-col", torch.ones(4, 4), torch.ones(4, 1), False, ("shape (4, 1)", "(4, 4)")),
    Case("shape-broadcast-row", torch.ones(4, 1), torch.ones(4, 4), False, ("shape (4, 4)",)),
    Case("shape-leading-1", torch.ones(4), torch.ones(1, 4), False, ("shape (1, 4)",)),
    Case("shape-scalar-for-vector", torch.ones(3), torch.tensor(1.0), False, ("shape ()",)),
    Case("shape-same-numel-2d", torch.zeros(4, 4), torch.zeros(2, 8), False, ("shape (2, 8)",)),
    Case("shape-same-numel-flat", torch.zeros(4, 4), torch.zeros(16), False, ("shape (16,)",)),
    Case("shape-empty-vs-not", torch.zeros(0), torch.zeros(1), False, ("shape (1,)",)),
    Case("dict-extra-key", {"a": t([1.0])}, {"a": t([1.0]), "b": t([2.0])}, False, ("keys ['a']",)),
    Case("dict-missing-key", {"a": t([1.0]), "b": t([2.0])}, {"a": t([1.0])}, False, ("keys ['a', 'b']",)),
    Case("dict-other-key", {"a": t([1.0])}, {"b": t([1.0])}, False, ("keys ['a']",)),
    Case(
        "dict-wrong-value",
        {"a": t([1.0]), "b": t([2.0])},
        {"a": t([1.0]), "b": t([2.5])},
        False,
        ("output['b']",),
    ),
    Case("dict-for-tensor", t([1.0]), {"a": t([1.0])}, False, ("expected a tensor, got dict",)),
    Case("list-for-tensor", t([1.0, 2.0]), [1.0, 2.0], False, ("expected a tensor, got list",)),
    Case("number-for-tensor", t(2.0), 2.0, False, ("expected a tensor, got float",)),
    Case("none-for-tensor", t([1.0]), None, False, ("expected a tensor, got NoneType",)),
    Case(
        "tensor-for-tuple",
        (t([1.0, 2.0]), t([3.0, 4.0])),
        t([[1.0, 2.0], [3.0, 4.0]]),
        False,
        ("expected a tuple of 2",),
    ),
    Case("list-shorter", [t([1.0]), t([2.0])], [t([1.0])], False, ("expected 2 outputs, got 1",)),
    Case("list-longer", [t([1.0])], [t([1.0]), t([2.0])], False, ("expected 1 outputs, got 2",)),
    Case(
        "tuple-wrong-second", (t([1.0]), t([2.0])), (t([1.0]), t([9.0])), False, ("output[1]", "index (0,)")
    ),
    Case("meta-device", torch.zeros(3), torch.zeros(3, device="meta"), False, ("meta device",)),
    # integers and booleans match exactly: no tolerance, however large the values
    Case(
        "int64-off-by-one",
        t([1, 2, 3], torch.int64),
        t([1, 2, 4], torch.int64),
        False,
        ("index (2,)", "exact match"),
    ),
    Case(
        "int64-large-off-by-one",
        t([10**12], torch.int64),
        t([10**12 + 1], torch.int64),
        False,
        ("exact match",),
    ),
    Case("uint8-off-by-one", t([200, 7], torch.uint8), t([200, 8], torch.uint8), False, ("index (1,)",)),
    Case(
        "bool-flipped",
        t([True, False, True], torch.bool),
        t([True, True, True], torch.bool),
        False,
        ("index (1,)", "exact match"),
    ),
    # Python numbers: ints exactly, floats within a tolerance, never a bool or a string for a number
    Case("py-int-equal", 3, 3, True),
    Case("py-int-off-by-one", 3, 4, False, ("got 4, expected 3",)),
    Case("py-int-large-within-float-tolerance", 10**6, 10**6 + 50, False, ("exact match",)),
    Case("py-int-from-tensor", 3, torch.tensor(3), True),
    Case("py-int-bool", 1, True, False, ("expected a number, got bool",)),
    Case("py-int-string", 1, "1", False, ("expected a number, got str",)),
    Case("py-float-close", 2.5, 2.5 + 1e-5, True),
    Case("py-float-off", 2.5, 2.6, False, ("mismatch",)),
    Case("py-float-nan", 2.5, NAN, False, ("non-finite",)),
    Case("py-float-big", 1e39, 1e39, True),  # finite in fp64; in fp32 it would be Inf and never match
    Case("py-float-from-tensor", 1.0, torch.tensor(1.0), True),
    Case("py-float-overflowing-int", 1.0, 10**400, False),
    Case("py-string", "abc", "abd", False, ("expected 'abc', got 'abd'",)),
    # complex values: the imaginary part counts
    Case("complex-equal", t([1 + 1j], torch.complex64), t([1 + 1j], torch.complex64), True),
    Case(
        "complex-imaginary-off",
        t([1 + 1j], torch.complex64),
        t([1 + 5j], torch.complex64),
        False,
        ("mismatch",),
    ),
    # the tolerance boundary: |diff| <= atol + rtol·|ref| (both DEFAULT_TOLERANCES[dtype]); just in, just out
    Case("fp32-at-1-just-inside", t([1.0]), t([1.0 + 1.9e-4]), True),
    Case("fp32-at-1-just-outside", t([1.0]), t([1.0 + 2.1e-4]), False, ("outside tolerance",)),
    Case("fp32-at-0-just-inside", t([0.0]), t([0.95e-4]), True),
    Case("fp32-at-0-just-outside", t([0.0]), t([1.05e-4]), False),
    Case("fp32-at-1000-just-inside", t([1000.0]), t([1000.095]), True),  # the relative part at work
    Case("fp32-at-1000-just-outside", t([1000.0]), t([1000.105]), False),
    Case("fp16-at-1-just-inside", t([1.0], torch.float16), t([1.0 + 20 * STEP16], torch.float16), True),
    Case("fp16-at-1-just-outside", t([1.0], torch.float16), t([1.0 + 21 * STEP16], torch.float16), False),
    Case("fp16-at-0-just-inside", t([0.0], torch.float16), t([0.0095], torch.float16), True),
    Case("fp16-at-0-just-outside", t([0.0], torch.float16), t([0.0105], torch.float16), False),
    Case("bf16-at-0-just-inside", t([0.0], torch.bfloat16), t([0.0095], torch.bfloat16), True),
    Case("bf16-at-0-just-outside", t([0.0], torch.bfloat16), t([0.0105], torch.bfloat16), False),
    # bf16 values near 1 are 2**-7 apart: two steps in (0.78 of the bound), three out (1.17)
    Case("bf16-at-1-inside", t([1.0], torch.bfloat16), t([1.0 + 2 * 2.0**-7], torch.bfloat16), True),
    Case("bf16-at-1-outside", t([1.0], torch.bfloat16), t([1.0 + 3 * 2.0**-7], torch.bfloat16), False),
    Case("fp32-looser-tolerance-given", t([1.0]), t([1.005]), True, tolerances={"float32": 1e-2}),
    Case("fp32-tighter-tolerance-given", t([1.0]), t([1.0 + 1e-5]), False, tolerances={"float32": 1e-6}),
    # a failure says where the first mismatch is (row-major) and how many elements are off
    Case("first-index-2d", _grid, _two_bad, False, ("index (1, 2)", "2 of 12 elements")),
    Case(
        "first-index-nan-2d",
        _grid,
        torch.where(_two_bad > 0, NAN, 0.0),
        False,
        ("index (1, 2)", "2 non-finite"),
    ),
    Case(
        "first-index-int-2d",
        _grid.long(),
        _two_bad.long(),
        False,
        ("index (1, 2)", "2 of 12 elements", "exact match"),
    ),
    Case("max-abs-error-reported", t([1.0, 2.0]), t([1.0, 2.0 + 5e-5]), True, max_abs=5e-5),
    # large enough for the bare verdict to read a strided sample first (BARE_SAMPLE): a bad element on the
    # stride fails there, one off it only in the whole
    Case("large-one-bad-in-the-sample", _large, _large_bad_at(0), False, ("index (0,)",)),
    Case("large-one-bad-off-the-sample", _large, _large_bad_at(1), False, ("index (1,)",)),
    Case("large-equal", _large, _large.clone(), True, max_abs=0.0),
]


def check(compare_outputs: Callable[..., Any], case: Case) -> None:
    outcome = compare_outputs(case.ref, case.cand, case.tolerances)
    assert outcome.passed is case.passes, f"{case.id}: passed={outcome.passed}: {outcome.message}"
    # the replay defence's quick reading: the same verdict and the same words, from one read-back per tensor
    quick = compare_outputs(case.ref, case.cand, case.tolerances, quick=True)
    assert (quick.passed, quick.message) == (outcome.passed, outcome.message), f"{case.id} (quick): {quick}"
    if isinstance(case.ref, torch.Tensor) and isinstance(case.cand, torch.Tensor):
        # the weak-output checks' bare verdict, from the same module as compare_outputs (a mutant's own)
        bare = compare_outputs.__globals__["tensor_passes"](case.ref, case.cand, case.tolerances)
        assert bare is case.passes, f"{case.id} (bare verdict): passed={bare}"
    for words in case.says:
        assert words in outcome.message, f"{case.id}: {words!r} not in {outcome.message!r}"
    if case.passes:
        assert outcome.message == ""
    if case.max_abs is not None:
        assert math.isclose(outcome.max_abs_error, case.max_abs, rel_tol=1e-2, abs_tol=1e-9), outcome


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_compare(case: Case) -> None:
    check(compare.compare_outputs, case)


def test_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


def test_the_boundary_cases_sit_where_they_claim() -> None:
    """The just-inside / just-outside values really are within 10% of the bound on either side."""
    for case in CASES:
        if "-just-" not in case.id:
            continue
        ref, cand = case.ref.double(), case.cand.double()
        tol = DEFAULT_TOLERANCES[str(case.ref.dtype).replace("torch.", "")]
        ratio = float((cand - ref).abs() / (tol + tol * ref.abs()))
        assert (0.9 <= ratio < 1.0) if case.passes else (1.0 < ratio <= 1.6), (case.id, ratio)


def test_inputs_are_left_as_they_were() -> None:
    ref, cand = t([1.0, 2.0]), t([1.0, NAN])
    compare.compare_outputs(ref, cand)
    assert ref.tolist() == [1.0, 2.0] and math.isnan(cand[1].item())


@pytest.mark.gpu
def test_a_candidate_on_another_device_is_compared_by_value() -> None:
    """A CUDA output for a CPU reference is moved and compared, never waved through or crashed on."""
    ref = t([1.0, 2.0])
    assert compare.compare_outputs(ref, ref.cuda()).passed
    wrong = compare.compare_outputs(ref, t([1.0, 3.0]).cuda())
    assert not wrong.passed and "index (1,)" in wrong.message


def _on_cuda(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value if value.is_meta else value.cuda()  # a meta tensor holds no values to move
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cuda(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_cuda(v) for k, v in value.items()}
    return value


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c.ref, torch.Tensor)], ids=lambda c: c.id)
def test_every_tensor_case_gets_the_same_verdict_on_the_gpu(case: Case) -> None:
    """The quick reading's one reduction (its max must carry NaN through, as the CPU's does) and the full
    reading give each case's verdict on CUDA tensors too."""
    check(compare.compare_outputs, dataclasses.replace(case, ref=_on_cuda(case.ref), cand=_on_cuda(case.cand)))


@dataclass(frozen=True)
class Mutation:
    """A plausible bug in compare.py: ``search`` (found exactly once) becomes ``replace``; each case
    named in ``killers`` must fail under it."""

    name: str
    search: str
    replace: str
    killers: tuple[str, ...]


NONFINITE = "    nonfinite = ~torch.isfinite(c)\n"
SHAPE = "    if tuple(cand.shape) != tuple(ref.shape):\n"
BOUND = "    bad = diff > (tol + tol * r.abs())\n"
KEYS = "        if not isinstance(cand, dict) or set(ref) != set(cand):\n"
LENGTH = """        if len(ref) != len(cand):
            return f"{where}: expected {len(ref)} outputs, got {len(cand)}"
        for i, (r, c) in enumerate(zip(ref, cand, strict=True)):
"""
QUICK_MAX = "excess.amax() <= 0"
QUICK_BOUND = "r.abs().mul_(tol).add_(tol)"
MUTATIONS: list[Mutation] = [
    # the weak-output checks' bare verdict must read the tolerances it is given
    Mutation(
        "bare-verdict-ignores-given-tolerances",
        "tolerance_for(ref.dtype, {**DEFAULT_TOLERANCES, **(tolerances or {})})",
        "tolerance_for(ref.dtype, DEFAULT_TOLERANCES)",
        ("fp32-looser-tolerance-given", "fp32-tighter-tolerance-given"),
    ),
    Mutation(
        "bare-verdict-reads-only-the-sample",
        "    return _within(r.to(work), c.to(work), tol)\n",
        "    return True\n",
        ("large-one-bad-off-the-sample",),
    ),
    # the quick reading must pass no more than the full one (what it does not pass is read in full anyway):
    # a max that skips NaN passes every non-finite value (an Inf reference's excess is Inf - Inf), and a
    # looser bound passes what the full one refuses
    Mutation(
        "quick-max-skips-nan",
        QUICK_MAX,
        "excess.nan_to_num(nan=0.0).amax() <= 0",
        ("nan", "inf-in-reference", "nan-in-reference"),
    ),
    Mutation(
        "quick-bound-loosened",
        QUICK_BOUND,
        "r.abs().mul_(tol).add_(2 * tol)",
        ("fp32-at-0-just-outside", "fp16-at-0-just-outside"),
    ),
    # the three the issue names: a NaN passes, a dtype mismatch passes, an extra or missing dict key passes
    Mutation(
        "nan-passes",
        NONFINITE,
        "    nonfinite = torch.isinf(c)\n",
        ("nan", "nan-in-second-of-tuple", "py-float-nan"),
    ),
    Mutation(
        "dtype-unchecked",
        "    if cand.dtype != ref.dtype:\n",
        "    if False:\n",
        ("dtype-fp64-for-fp32", "dtype-fp16-for-fp32", "dtype-int-for-float", "dtype-int32-for-int64"),
    ),
    Mutation(
        "dict-keys-unchecked",
        KEYS,
        "        if not isinstance(cand, dict):\n",
        ("dict-extra-key", "dict-missing-key", "dict-other-key"),
    ),
    Mutation(
        "dict-extra-key-passes",
        KEYS,
        "        if not isinstance(cand, dict) or not set(ref) <= set(cand):\n",
        ("dict-extra-key",),
    ),
    Mutation(
        "dict-missing-key-passes",
        KEYS
        + '            return f"{where}: expected a dict with keys {sorted(map(str, ref))}"\n        for key in ref:\n',
        "        if not isinstance(cand, dict) or not set(cand) <= set(ref):\n"
        + '            return f"{where}: expected a dict with keys {sorted(map(str, ref))}"\n        for key in cand:\n',
        ("dict-missing-key",),
    ),
    # non-finite values
    Mutation("inf-passes-the-finite-check", NONFINITE, "    nonfinite = torch.isnan(c)\n", ("inf", "-inf")),
    Mutation(
        "finite-check-removed",
        "    if bool(nonfinite.any()):\n",
        "    if False:\n",
        ("nan", "inf", "-inf", "first-index-nan-2d"),
    ),
    Mutation(
        "finite-check-on-the-reference",
        NONFINITE,
        "    nonfinite = ~torch.isfinite(r)\n",
        ("nan", "nan-fp16", "nan-deep-in-dict"),
    ),
    Mutation(
        "nonfinite-reference-matches",
        "    bad |= ~torch.isfinite(r)  # a non-finite reference cannot be matched within a tolerance\n",
        "",
        ("nan-in-reference", "inf-in-reference"),
    ),
    # structure
    Mutation(
        "tuple-only-first-compared",
        "zip(ref, cand, strict=True)",
        "zip(ref[:1], cand[:1], strict=True)",
        ("nan-in-second-of-tuple", "tuple-wrong-second"),
    ),
    Mutation(
        "list-length-unchecked",
        LENGTH,
        "        for i, (r, c) in enumerate(zip(ref, cand)):\n",
        ("list-shorter", "list-longer"),
    ),
    Mutation(
        "sequence-type-unchecked",
        """        if not isinstance(cand, (list, tuple)):
            return f"{where}: expected a {type(ref).__name__} of {len(ref)}, got {type(cand).__name__}"
""",
        "",
        ("tensor-for-tuple",),
    ),
    Mutation(
        "non-tensor-coerced",
        '            return f"{where}: expected a tensor, got {type(cand).__name__}"\n',
        "            cand = torch.as_tensor(cand)\n",
        ("list-for-tensor", "number-for-tensor"),
    ),
    Mutation(
        "index-left-out-of-the-location",
        'f"{where}[{i}]"',
        "where",
        ("nan-in-second-of-tuple", "tuple-wrong-second"),
    ),
    Mutation(
        "key-left-out-of-the-location",
        'f"{where}[{key!r}]"',
        "where",
        ("dict-wrong-value", "nan-deep-in-dict"),
    ),
    Mutation("other-values-unchecked", "    if ref != cand:\n", "    if False:\n", ("py-string",)),
    # shapes
    Mutation(
        "shape-unchecked",
        SHAPE,
        "    if False:\n",
        (
            "shape-broadcast-col",
            "shape-broadcast-row",
            "shape-leading-1",
            "shape-scalar-for-vector",
            "shape-empty-vs-not",
        ),
    ),
    Mutation(
        "shape-only-numel",
        SHAPE,
        "    if cand.numel() != ref.numel():\n",
        ("shape-leading-1", "shape-same-numel-2d", "shape-same-numel-flat"),
    ),
    Mutation(
        "shape-only-rank",
        SHAPE,
        "    if cand.dim() != ref.dim():\n",
        ("shape-broadcast-col", "shape-broadcast-row"),
    ),
    # devices
    Mutation(
        "meta-waved-through",
        '            return f"{where}: the tensor is on the meta device: it holds no values"\n',
        "            return None\n",
        ("meta-device",),
    ),
    Mutation(
        "meta-unguarded",
        """        if cand.is_meta:
            return f"{where}: the tensor is on the meta device: it holds no values"
""",
        "",
        ("meta-device",),
    ),
    # exact integers, Python numbers, complex values
    Mutation(
        "integers-within-a-tolerance",
        "    if not (ref.is_floating_point() or ref.is_complex()):\n",
        "    if ref.dtype == torch.bool:\n",
        ("int64-large-off-by-one", "int64-off-by-one", "first-index-int-2d"),
    ),
    Mutation(
        "py-int-within-a-tolerance",
        "    if isinstance(ref, int):\n",
        "    if False:\n",
        ("py-int-large-within-float-tolerance",),
    ),
    Mutation(
        "py-bool-counts-as-a-number",
        "    if not isinstance(cand, (int, float)) or isinstance(cand, bool):\n",
        "    if not isinstance(cand, (int, float)):\n",
        ("py-int-bool",),
    ),
    Mutation(
        "py-float-narrowed-to-fp32",
        """        got = torch.tensor(float(cand), dtype=torch.float64)
    except OverflowError:
        return f"{where}: got {cand!r}, expected {ref!r}"
    return _compare_tensors(torch.tensor(ref, dtype=torch.float64), got, where, tols, acc)
""",
        """        got = torch.tensor(float(cand))
    except OverflowError:
        return f"{where}: got {cand!r}, expected {ref!r}"
    return _compare_tensors(torch.tensor(ref), got, where, tols, acc)
""",
        ("py-float-big",),
    ),
    Mutation(
        "complex-cast-to-real",
        "    if dtype.is_complex:\n        return torch.complex128 if wide else torch.complex64\n",
        "",
        ("complex-imaginary-off",),
    ),
    # tolerances
    Mutation(
        "absolute-tolerance-only",
        BOUND,
        "    bad = diff > tol\n",
        ("fp32-at-1-just-inside", "fp32-at-1000-just-inside", "fp16-at-1-just-inside"),
    ),
    Mutation(
        "absolute-tolerance-doubled",
        BOUND,
        "    bad = diff > (2 * tol + tol * r.abs())\n",
        ("fp32-at-0-just-outside", "fp16-at-0-just-outside", "bf16-at-0-just-outside"),
    ),
    Mutation(
        "relative-tolerance-doubled",
        BOUND,
        "    bad = diff > (tol + 2 * tol * r.abs())\n",
        ("fp32-at-1000-just-outside", "fp32-at-1-just-outside"),
    ),
    Mutation(
        "at-or-over-the-bound-passes",
        BOUND,
        "    bad = diff > 1.2 * (tol + tol * r.abs())\n",
        ("fp32-at-1-just-outside", "fp16-at-1-just-outside"),
    ),
    Mutation(
        "fp16-gets-fp32-tolerance",
        '    key = str(dtype).replace("torch.", "")\n',
        "    key = str(dtype)\n",
        ("fp16-at-1-just-inside", "fp16-at-0-just-inside", "bf16-at-0-just-inside"),
    ),
    Mutation(
        "everything-gets-fp16-tolerance",
        "    tol = tolerance_for(ref.dtype, tols)\n",
        '    tol = tols["float16"]\n',
        ("fp32-at-1-just-outside", "fp32-at-0-just-outside"),
    ),
    Mutation(
        "given-tolerances-ignored",
        "    tols = {**DEFAULT_TOLERANCES, **(tolerances or {})}\n",
        "    tols = dict(DEFAULT_TOLERANCES)\n",
        ("fp32-looser-tolerance-given", "fp32-tighter-tolerance-given"),
    ),
    Mutation(
        "defaults-override-given",
        "    tols = {**DEFAULT_TOLERANCES, **(tolerances or {})}\n",
        "    tols = {**(tolerances or {}), **DEFAULT_TOLERANCES}\n",
        ("fp32-looser-tolerance-given",),
    ),
    # empty tensors, the report
    Mutation(
        "empty-guard-removed", "    if r.numel() == 0:\n        return None\n", "", ("empty", "empty-2d")
    ),
    Mutation(
        "empty-guard-too-wide",
        "    if r.numel() == 0:\n",
        "    if r.numel() <= 1:\n",
        ("fp32-at-1-just-outside", "inf-in-reference"),
    ),
    Mutation(
        "failure-not-reported",
        "        summary.passed = False\n",
        "",
        ("nan", "dtype-fp64-for-fp32", "dict-extra-key"),
    ),
    Mutation(
        "first-index-is-the-last",
        ".nonzero()[0]",
        ".nonzero()[-1]",
        ("first-index-2d", "first-index-nan-2d", "first-index-int-2d"),
    ),
    Mutation(
        "first-index-column-major",
        "    for size in reversed(mask.shape):\n",
        "    for size in mask.shape:\n",
        ("first-index-2d", "first-index-int-2d"),
    ),
    Mutation(
        "max-error-not-recorded",
        "    acc.max_abs_error = max(acc.max_abs_error, float(diff.max()))\n",
        "",
        ("max-abs-error-reported",),
    ),
]
CASE_BY_ID = {case.id: case for case in CASES}


def load_mutant(source: str, tmp_path: Path, name: str) -> ModuleType:
    """``source`` as a module of its own (not engine.eval.compare), loaded from a file in ``tmp_path``."""
    path = tmp_path / "compare_mutant.py"
    path.write_text(source)
    module_name = f"compare_mutant_{name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[module_name]
    return module


def failing_cases(compare_outputs: Callable[..., Any]) -> list[str]:
    """The ids of the cases ``compare_outputs`` gets wrong (an exception counts as wrong)."""
    failing = []
    for case in CASES:
        try:
            check(compare_outputs, case)
        except Exception:
            failing.append(case.id)
    return failing


def test_the_unmutated_copy_passes_every_case(tmp_path: Path) -> None:
    """The control for the mutation test: loading a copy is not itself what fails the cases."""
    mutant = load_mutant(SOURCE.read_text(), tmp_path, "none")
    assert mutant.compare_outputs is not compare.compare_outputs
    assert failing_cases(mutant.compare_outputs) == []


def test_mutation_names_are_unique_and_killers_exist() -> None:
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)
    assert [k for m in MUTATIONS for k in m.killers if k not in CASE_BY_ID] == []


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_of_compare_is_killed(mutation: Mutation, tmp_path: Path) -> None:
    source = SOURCE.read_text()
    assert source.count(mutation.search) == 1, f"{mutation.name}: the search text must occur exactly once"
    mutant = load_mutant(source.replace(mutation.search, mutation.replace), tmp_path, mutation.name)
    with warnings.catch_warnings():  # a mutant may warn (casting complex to real does)
        warnings.simplefilter("ignore")
        failing = failing_cases(mutant.compare_outputs)
    survivors = [k for k in mutation.killers if k not in failing]
    assert failing, f"{mutation.name} survived every case"
    assert survivors == [], f"{mutation.name}: named killers that passed: {survivors} (failing: {failing})"
