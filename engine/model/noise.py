"""How far the user's model is from itself at a higher precision: the bar of the whole-model check.

A model in bf16 does not compute its own answer to bf16's 1e-2: rounding compounds through its layers,
and an honest kernel that rounds once differently lands as far from the eager bf16 output as eager is
from the exact one. So the whole-model check (``engine.model.apply``) does not use the per-dtype bar
alone. The model process runs the same weights on the same inputs once more at a higher precision
(float32 for a 16-bit model, float64 for a float32 one) and measures the eager model's own deviation as
the tolerance that comparison would need (``max |low − high| / (1 + |high|)``, over every floating output
element and a few batches). The whole-model tolerance is then ``max(default, NOISE_FACTOR × deviation)``,
and the report says both numbers, so a looser bar is never silent.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from engine.eval.floor import tensors
from engine.model.load import Loaded, cast
from engine.model.spec import ModelSpec

NOISE_FACTOR = 3.0
BATCHES = 3


def _floats(value: Any) -> list[torch.Tensor]:
    if isinstance(value, dict):
        value = list(value.values())
    return [t for t in tensors(value) if t.is_floating_point()]


def own_deviation(spec: ModelSpec, loaded: Loaded) -> dict[str, Any] | None:
    """``{"dtype", "truth", "deviation"}``; None for a float64 model or when the higher-precision run fails."""
    low_dtype = getattr(torch, spec.torch_dtype)
    if low_dtype == torch.float64:
        return None
    high_dtype = torch.float64 if low_dtype == torch.float32 else torch.float32
    worst = 0.0
    device = torch.device(spec.device)
    try:
        high_model = copy.deepcopy(loaded.model).to(high_dtype)
        with torch.no_grad():
            for _ in range(BATCHES):
                low = _floats(loaded.model(*loaded.args, **loaded.kwargs))
                high = _floats(high_model(*cast(loaded.args, high_dtype, device), **cast(loaded.kwargs, high_dtype, device)))
                for a, b in zip(low, high, strict=False):
                    a64, b64 = a.double(), b.double()
                    if a64.numel():
                        worst = max(worst, float(((a64 - b64).abs() / (1 + b64.abs())).max()))
                loaded.args = tuple(_fresh(a) for a in loaded.args)
                loaded.kwargs = {k: _fresh(v) for k, v in loaded.kwargs.items()}
        del high_model
    except Exception:  # noqa: BLE001 - without the measurement the per-dtype bar stands
        return None
    return {"dtype": spec.torch_dtype, "truth": str(high_dtype).removeprefix("torch."), "deviation": worst}


def _fresh(value: Any) -> Any:
    """Another batch of the same kind: floating tensors redrawn (integers kept: token ids stay valid)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.randn_like(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    return value


def tolerance(default: float, noise: dict[str, Any] | None) -> float:
    if not noise:
        return default
    return max(default, NOISE_FACTOR * noise["deviation"])
