"""The whole-model check's bar (engine.model.noise): the model's own deviation from a higher-precision run
of itself, measured, and the bar never under the dtype's default."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from engine.model.load import Loaded
from engine.model.noise import NOISE_FACTOR, own_deviation, tolerance
from engine.model.spec import build_spec
from tests.conftest import EXAMPLES

MODEL = EXAMPLES / "models" / "tiny_mlp.py"


def deep_mlp(depth: int = 12) -> nn.Module:
    torch.manual_seed(0)
    layers = [m for _ in range(depth) for m in (nn.Linear(64, 64), nn.GELU())]
    return nn.Sequential(*layers).eval()


def test_a_bf16_models_own_deviation_is_measured_against_its_float32_self() -> None:
    spec = build_spec(f"{MODEL}:make_model", input_shapes=["32,64"], dtype="bf16")
    model = deep_mlp().to(torch.bfloat16)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    noise = own_deviation(spec, Loaded(model, (x,), {}))
    assert noise is not None and (noise["dtype"], noise["truth"]) == ("bfloat16", "float32")
    # the first batch's deviation, computed here independently, is one of those the maximum was taken over
    high = copy.deepcopy(model).float()
    with torch.no_grad():
        a, b = model(x).double(), high(x.float()).double()
    first = float(((a - b).abs() / (1 + b.abs())).max())
    assert 0 < first <= noise["deviation"] < 0.5
    assert tolerance(0.01, noise) == pytest.approx(max(0.01, NOISE_FACTOR * noise["deviation"]))


def test_the_bar_is_never_under_the_default_and_a_float32_model_is_judged_against_float64() -> None:
    assert tolerance(0.01, {"deviation": 0.001}) == 0.01
    assert tolerance(0.01, {"deviation": 0.05}) == pytest.approx(0.15)
    assert tolerance(1e-4, None) == 1e-4
    spec = build_spec(f"{MODEL}:make_model", input_shapes=["32,64"])
    noise = own_deviation(spec, Loaded(deep_mlp(), (torch.randn(32, 64),), {}))
    assert noise is not None and noise["truth"] == "float64" and 0 < noise["deviation"] < 1e-5
