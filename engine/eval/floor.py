"""The task's lower bounds on work, measured in the worker after timing (ARCHITECTURE.md §3).

:func:`measure` calls the reference once on the timed inputs and returns what any correct kernel must
at least move or compute: the bytes of the task's inputs (each read once) and of the reference's
outputs (each written once), the reference's parameters and buffers (recorded, not counted in the
minimum: see ``engine.eval.plausibility``), and the FLOPs of that call.

The FLOPs are counted by :func:`flop_counter`, a ``TorchFunctionMode`` active during that call: every
matmul-like call (``@``, ``mm``, ``bmm``, ``addmm``, ``linear``, ``einsum``, ``tensordot``, …),
convolution and attention is ``2 × multiply-adds`` from the shapes, as ``torch.utils.flop_counter``
counts them (the tests hold the two equal); elementwise work counts nothing, so the count is low,
never high. Recurrent layers run as one fused call and count nothing (``note`` says so).

Why not ``torch.utils.flop_counter.FlopCounterMode`` over a meta-device copy, the first design: entering
any ``TorchDispatchMode`` imports ``torch._dynamo``, and the meta device loads its registrations, which
cost 1.1–1.5 s per worker on the idle 2-core development machine (3.7–4.4 s when it was loaded), against
2 s for a whole CPU evaluation of a small task. Counting during one real call costs that call (timing
made dozens) plus a few milliseconds the first time and ~0.3 ms after.

Measuring never raises and never changes a verdict: what cannot be measured is None, and ``note``
says why.
"""

from __future__ import annotations

import math
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
    if tensor.numel() == 0:
        return 0
    size = tensor.element_size()
    for extent, stride in zip(tensor.shape, tensor.stride(), strict=True):
        if stride != 0:
            size *= extent
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


# Where the contracted length K of a matmul-like call comes from: (argument index, its dimension).
# FLOPs = 2 × output elements × K (× the batch for addbmm, which sums its batch away).
_CONTRACTIONS = {
    "matmul": (0, -1), "__matmul__": (0, -1), "__rmatmul__": (1, -1), "mm": (0, -1), "bmm": (0, -1),
    "mv": (0, -1), "dot": (0, -1), "vdot": (0, -1), "inner": (0, -1), "linear": (0, -1),
    "addmm": (1, -1), "addmv": (1, -1), "baddbmm": (1, -1), "addbmm": (1, -1),
}  # fmt: skip
_CONVOLUTIONS = {"conv1d", "conv2d", "conv3d"}
_TRANSPOSED = {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}


def call_flops(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """FLOPs of one torch call, from its name, arguments and output (0 for anything else)."""
    name = name if name.startswith("__") else name.rstrip("_")  # addmm_ counts as addmm
    if name in _CONTRACTIONS:
        index, dim = _CONTRACTIONS[name]
        k = args[index].shape[dim] if args[index].dim() else 1
        batch = args[1].shape[0] if name == "addbmm" else 1
        return 2 * out.numel() * k * batch
    if name in _CONVOLUTIONS:  # every output element: Cin/groups × kernel multiply-adds
        return 2 * out.numel() * math.prod(args[1].shape[1:])
    if name in _TRANSPOSED:  # every input element: Cout/groups × kernel multiply-adds
        return 2 * args[0].numel() * math.prod(args[1].shape[1:])
    if name == "einsum":
        return _einsum_flops(args)
    if name == "tensordot":
        a, dims = args[0], args[2] if len(args) > 2 else kwargs.get("dims", 2)
        axes = range(a.dim() - dims, a.dim()) if isinstance(dims, int) else dims[0]
        return 2 * out.numel() * math.prod(a.shape[d] for d in axes)
    if name == "scaled_dot_product_attention":
        q, k, v = args[:3]
        return 2 * math.prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])
    if name == "multi_head_attention_forward":  # (L, N, E): in-projections, QK^T and AV, out-projection
        query, key, value = args[:3]
        projections = 2 * query.shape[-1] * (2 * query.numel() + key.numel() + value.numel())
        return projections + 4 * query.numel() * key.shape[0]
    return 0


def _einsum_flops(args: tuple[Any, ...]) -> int:
    """A two-operand einsum: 2 × the product of every index's extent (what its bmm does); else 0."""
    equation, operands = args[0], args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms = equation.replace(" ", "").split("->")[0].split(",")
    if len(operands) != 2 or len(terms) != 2 or "." in equation:
        return 0
    sizes: dict[str, int] = {}
    for letters, operand in zip(terms, operands, strict=True):
        sizes.update(zip(letters, operand.shape, strict=True))
    return 2 * math.prod(sizes.values())


_COUNTER_CLASS: Any = None


def flop_counter() -> Any:
    """A fresh FLOP-counting ``TorchFunctionMode``: ``with counter: ...``, then ``counter.flops``.

    Inside a call the mode is off, so a Python-level function (``einsum``, multi-head attention) is
    counted once by its own formula, never again through the calls it makes. The class is made on
    first use, so importing this module needs no torch."""
    global _COUNTER_CLASS
    if _COUNTER_CLASS is None:
        from torch.overrides import TorchFunctionMode

        class FlopCount(TorchFunctionMode):
            def __init__(self) -> None:
                super().__init__()
                self.flops = 0
                self.failed: list[str] = []

            def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                name = getattr(func, "__name__", "")
                try:
                    self.flops += call_flops(name, tuple(args), kwargs, out)
                except Exception:  # noqa: BLE001 - an unusual signature: that call is not counted
                    self.failed.append(name)
                return out

        _COUNTER_CLASS = FlopCount
    return _COUNTER_CLASS()


def measure(reference_model: Any, inputs: list[Any]) -> dict[str, Any]:
    """The task's lower bounds from one ``reference_model(*inputs)``: ``input_bytes``, ``output_bytes``,
    ``param_bytes``, ``flops``, ``dtype`` (the floating dtype holding the most bytes, None when there is
    none), ``dtypes`` (every floating dtype seen), ``note`` (why a number is missing or low) and
    ``seconds`` (what measuring cost, the call included)."""
    import torch

    started = time.monotonic()
    record: dict[str, Any] = {"input_bytes": None, "output_bytes": None, "param_bytes": None, "flops": None}
    notes: list[str] = []
    output = None
    try:
        counter = flop_counter()
        with torch.no_grad(), counter:
            output = reference_model(*inputs)
        record["flops"] = counter.flops
        if counter.failed:
            notes.append(f"FLOPs of {', '.join(sorted(set(counter.failed)))} not counted")
        if any(isinstance(m, torch.nn.RNNBase) for m in reference_model.modules()):
            notes.append("FLOPs of recurrent layers (nn.LSTM, nn.GRU, nn.RNN: one fused call) not counted")
    except Exception as error:  # noqa: BLE001 - measuring must never change the verdict
        notes.append(f"the reference call failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}")
    try:
        state = [*reference_model.parameters(), *reference_model.buffers()]
        record["input_bytes"] = total_bytes(inputs)
        record["output_bytes"] = total_bytes(output) if output is not None else None
        record["param_bytes"] = total_bytes(state)
        dtypes = floating_dtypes(inputs, output, state)
        record["dtype"] = max(dtypes, key=lambda name: dtypes[name]) if dtypes else None
        record["dtypes"] = sorted(dtypes)
    except Exception as error:  # noqa: BLE001
        notes.append(f"bytes not measured: {type(error).__name__}: {error}")
    record["note"] = "; ".join(notes)
    record["seconds"] = round(time.monotonic() - started, 6)
    return record
