"""The drop-in runtime (engine/model/dropin.py, copied into every export): weights by name, the module's
own calls, all swaps checked before any is made. Kernels here are plain PyTorch: the runtime does not
care what a ModelNew computes with, only that it takes the module's place faithfully."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn

from engine.model import dropin

TASK = '''
import torch
import torch.nn as nn


class Inner(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x, scale=1.0):
        return self.fc(x) * scale


class Model(Inner):
    def __init__(self, dim):
        super().__init__(dim)

    def forward(self, x):
        return super().forward(x, scale=1.0)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''

GOOD = '''
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return F.linear(x, self.fc.weight, self.fc.bias)
'''

RENAMED = GOOD.replace("self.fc = nn.Linear(dim, dim)", "self.proj = nn.Linear(dim, dim)").replace("self.fc.", "self.proj.")
STALE = GOOD.replace(
    "self.fc = nn.Linear(dim, dim)", "self.fc = nn.Linear(dim, dim)\n        self.register_buffer('w', self.fc.weight.detach().clone(), persistent=False)"
).replace("self.fc.weight, self.fc.bias", "self.w, self.fc.bias")

_names = itertools.count()


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from types import ModuleType

        inner = ModuleType("inner")
        exec(TASK, inner.__dict__)
        self.one = inner.Inner(8)
        self.two = inner.Inner(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.two(self.one(x), scale=1.0)


def swaps(kernel: str, paths: list[str]) -> tuple[list[dict], dict[str, str], dict[str, str]]:
    task = f"inner_{next(_names)}"
    swap = {"task": task, "paths": paths, "inputs": ["x"], "constants": {"scale": "1.0"}}
    return [swap], {task: TASK}, {task: kernel}


def test_a_kernel_takes_the_modules_place_with_its_weights_and_its_calls() -> None:
    model = Outer().eval()
    x = torch.randn(4, 8)
    expected = model(x)
    dropin.apply_swaps(model, *swaps(GOOD, ["one", "two"]), verify=True)
    assert type(model.one).__name__ == "ModelNew"
    assert torch.allclose(model(x), expected)
    with pytest.raises(dropin.SwapError, match=r"two was called with scale=2.0; its kernel \(inner_\d+\) was written for scale=1.0"):
        model.two(x, scale=2.0)


def test_weights_match_by_name_then_by_a_common_prefix_then_by_shape_and_last_name() -> None:
    original = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    wrapped = nn.Module()
    wrapped.inner = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    assert dropin.match_state(wrapped, original, "p") == {f"inner.{k}": k for k in original.state_dict()}
    renamed = nn.Module()
    renamed.first, renamed.second = nn.Linear(3, 4), nn.Linear(4, 2)
    assert dropin.match_state(renamed, original, "p") == {"first.weight": "0.weight", "first.bias": "0.bias", "second.weight": "1.weight", "second.bias": "1.bias"}
    twins = nn.Module()
    twins.a = nn.Linear(4, 4)
    with pytest.raises(dropin.SwapError, match=r"p: ModelNew's 'a.weight' \[4, 4\] matches 2 of the module's"):
        dropin.match_state(twins, nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)), "p")


def test_a_renamed_kernel_still_gets_the_weights() -> None:
    model = Outer().eval()
    x = torch.randn(4, 8)
    expected = model(x)
    dropin.apply_swaps(model, *swaps(RENAMED, ["one"]), verify=True)
    assert torch.allclose(model(x), expected)


def test_verify_refuses_derived_state_the_models_weights_make_stale_and_swaps_nothing() -> None:
    model = Outer().eval()
    x = torch.randn(4, 8)
    expected = model(x)
    with pytest.raises(dropin.SwapError, match="one: its kernel does not compute what the module does with the model's weights"):
        dropin.apply_swaps(model, *swaps(STALE, ["one", "two"]), verify=True)
    assert type(model.one).__name__ == "Inner" and torch.equal(model(x), expected)
    # unverified, the same kernel swaps in and computes something else: what verify and the whole-model check are for
    dropin.apply_swaps(model, *swaps(STALE, ["one"]), verify=False)
    assert not torch.allclose(model(x), expected)


def test_compare_uses_the_dtype_tolerance_and_never_passes_nan() -> None:
    a = torch.ones(4, dtype=torch.bfloat16)
    assert dropin.compare(a, a + 0.005) is None
    assert "max abs error" in dropin.compare(a, a + 0.05)
    assert "NaN" in dropin.compare(torch.ones(2), torch.tensor([1.0, float("nan")]))
    assert "output tensors" in dropin.compare((a, a), a)
