"""The task's lower bounds on work, measured in the worker after timing (ARCHITECTURE.md §3).

:func:`measure` returns what any correct kernel must at least move or compute: the bytes of the task's
inputs (each read once) and of the reference's outputs (each written once), the reference's
parameters and buffers (recorded, not counted in the minimum: see ``engine.eval.plausibility``), and the
FLOPs of one reference call as ``torch.utils.flop_counter`` counts them (matmuls, convolutions,
attention; elementwise work counts nothing, so the count is low, never high). The FLOPs come from a
call on the meta device, so they cost no real compute: the parameters, buffers and inputs are replaced
by meta tensors of the same shapes. A reference the meta device cannot run (an op without a meta
kernel, a value read back with ``.item()``) records ``flops = None`` and says why in ``note``: measuring
never raises and never changes a verdict. The parent turns these numbers and the GPU's peaks into
the time the hardware allows (``engine.eval.plausibility``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any


def tensors(value: Any) -> Iterator[Any]:
    """Every tensor in ``value``, through nested lists, tuples and dict values."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)


def distinct_bytes(tensor: Any) -> int:
    """The bytes a kernel must touch to read or write every element of ``tensor`` once.

    A broadcast (stride-0) dimension repeats the same memory, and a view never covers more than its
    storage, so both are taken out: the number is a lower bound, as the floor needs.
    """
    size = tensor.element_size()
    for extent, stride in zip(tensor.shape, tensor.stride(), strict=True):
        if stride != 0:
            size *= extent
    if tensor.numel() == 0:
        return 0
    if tensor.device.type == "meta":
        return size
    return min(size, tensor.untyped_storage().nbytes())


def total_bytes(value: Any) -> int:
    """The distinct bytes of every tensor in ``value``; tensors sharing a storage count it once."""
    by_storage: dict[Any, int] = {}
    for tensor in tensors(value):
        if tensor.device.type == "meta":
            key: Any = ("meta", id(tensor))
        else:
            key = (str(tensor.device), tensor.untyped_storage().data_ptr())
        by_storage[key] = max(by_storage.get(key, 0), distinct_bytes(tensor))
    return sum(by_storage.values())


def floating_dtypes(*values: Any) -> dict[str, int]:
    """Bytes per floating dtype over the tensors of ``values`` (``{"float32": 4096, ...}``)."""
    found: dict[str, int] = {}
    for value in values:
        for tensor in tensors(value):
            if tensor.is_floating_point():
                name = str(tensor.dtype).removeprefix("torch.")
                found[name] = found.get(name, 0) + distinct_bytes(tensor)
    return found


def meta_flops(model: Any, inputs: list[Any]) -> tuple[int | None, str]:
    """FLOPs of one ``model(*inputs)`` counted on the meta device; (None, why) when that run fails.

    The model is deep-copied with its parameters and buffers replaced by meta tensors in the copy's
    memo, so no real weight is copied and the worker's reference is left untouched.
    """
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        memo: dict[int, Any] = {}
        for param in model.parameters():
            memo[id(param)] = torch.nn.Parameter(
                torch.empty_like(param, device="meta"), requires_grad=param.requires_grad
            )
        for buffer in model.buffers():
            memo[id(buffer)] = torch.empty_like(buffer, device="meta")
        meta_model = copy.deepcopy(model, memo)
        meta_inputs = [_to_meta(value) for value in inputs]
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), torch.device("meta"), counter:
            meta_model(*meta_inputs)
        return int(counter.get_total_flops()), ""
    except Exception as error:  # noqa: BLE001 - an op without a meta kernel: no count, and why
        text = " ".join(str(error).split())[:300]
        return None, f"FLOPs not counted: the reference did not run on the meta device ({type(error).__name__}: {text})"


def _to_meta(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v) for v in value)
    return value


def measure(reference_model: Any, inputs: list[Any], output: Any) -> dict[str, Any]:
    """The task's lower bounds: ``input_bytes``, ``output_bytes``, ``param_bytes``, ``flops`` (or None),
    ``dtype`` (the floating dtype holding the most bytes, None when there is none), ``dtypes`` (every
    floating dtype seen), ``note`` (why a number is missing) and ``seconds`` (what measuring cost)."""
    started = time.monotonic()
    record: dict[str, Any] = {"input_bytes": None, "output_bytes": None, "param_bytes": None, "flops": None}
    notes: list[str] = []
    try:
        state = [*reference_model.parameters(), *reference_model.buffers()]
        record["input_bytes"] = total_bytes(inputs)
        record["output_bytes"] = total_bytes(output)
        record["param_bytes"] = total_bytes(state)
        dtypes = floating_dtypes(inputs, output, state)
        record["dtype"] = max(dtypes, key=lambda name: dtypes[name]) if dtypes else None
        record["dtypes"] = sorted(dtypes)
    except Exception as error:  # noqa: BLE001 - measuring must never change the verdict
        notes.append(f"bytes not measured: {type(error).__name__}: {error}")
    record["flops"], why = meta_flops(reference_model, list(inputs))
    if why:
        notes.append(why)
    record["note"] = "; ".join(notes)
    record["seconds"] = round(time.monotonic() - started, 6)
    return record
