"""The numeric-mode flags both models run under, pinned and verified (ARCHITECTURE.md §3, "Defences").

TF32 for matmuls, a lower ``float32_matmul_precision`` or reduced-precision reductions make library
calls faster and less exact. A published agent result was inflated this way: its reference ran true
fp32, its kernels TF32. The flags are process-wide, so a candidate that turns one on inside its forward
and off again before the reference runs gets the speed without the reference sharing it, and the
switch may sit in C++ (``at::globalContext().setAllowTF32CuBLAS(true)``) where the Python guard
cannot see it.

The worker reads every flag once, before any candidate code (``pin``: torch's defaults in a fresh
process, the semantics KernelBench's timings assume), and checks them after the candidate's import,
its constructor and every call (``changed``). A change is put back at once, so the reference never
runs under it, and the kernel is refused (runtime rule ``precision-changed``). What this cannot see:
a switch made and undone within one candidate call from C++ under a name the static scan does not
know (``engine.guard.native`` names the ATen and cuBLAS setters).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

# Restore passes at most: a restore may move a flag through another API, so a pass can leave one to redo.
RESTORE_PASSES = 4


# The new API's (backend, op) pairs, each under the name a user sets it by. The "all" ones are what an
# op's "none" falls back to: unpinned, ``torch.backends.fp32_precision = "tf32"`` was never put back
# (restoring every op to "none" inherited it again), and cuDNN's and oneDNN's were not seen at all.
FP32_PRECISION = {
    ("generic", "all"): "torch.backends.fp32_precision",
    ("cuda", "all"): "torch.backends.cudnn.fp32_precision",
    ("cuda", "matmul"): "torch.backends.cuda.matmul.fp32_precision",
    ("cuda", "conv"): "torch.backends.cudnn.conv.fp32_precision",
    ("cuda", "rnn"): "torch.backends.cudnn.rnn.fp32_precision",
    ("mkldnn", "all"): "torch.backends.mkldnn.fp32_precision",
    ("mkldnn", "matmul"): "torch.backends.mkldnn.matmul.fp32_precision",
    ("mkldnn", "conv"): "torch.backends.mkldnn.conv.fp32_precision",
    ("mkldnn", "rnn"): "torch.backends.mkldnn.rnn.fp32_precision",
}


def _flags() -> dict[str, tuple[Callable[[], Any], Callable[[Any], None]]]:
    """name -> (read, restore) for every flag this torch has (older builds lack some)."""
    import torch

    c = torch._C
    flags: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {}

    def add(name: str, getter: str, setter: str, wrap: Callable[[Callable, Any], None] | None = None) -> None:
        get, put = getattr(c, getter, None), getattr(c, setter, None)
        if get is None or put is None:
            return
        flags[name] = (get, (lambda v, p=put: wrap(p, v)) if wrap else put)

    add("torch.backends.cuda.matmul.allow_tf32", "_get_cublas_allow_tf32", "_set_cublas_allow_tf32")
    add("torch.backends.cudnn.allow_tf32", "_get_cudnn_allow_tf32", "_set_cudnn_allow_tf32")
    add("torch.get_float32_matmul_precision()", "_get_float32_matmul_precision", "_set_float32_matmul_precision")
    for kind in ("fp16", "bf16"):
        add(
            f"torch.backends.cuda.matmul.allow_{kind}_reduced_precision_reduction",
            f"_get_cublas_allow_{kind}_reduced_precision_reduction",
            f"_set_cublas_allow_{kind}_reduced_precision_reduction",
            lambda put, v: put(v, True) if isinstance(v, bool) else put(*v),
        )
    add("torch.backends.cuda.matmul.allow_fp16_accumulation", "_get_cublas_allow_fp16_accumulation", "_set_cublas_allow_fp16_accumulation")
    add("torch.backends.mkldnn.allow_tf32", "_get_onednn_allow_tf32", "_set_onednn_allow_tf32")
    add("torch.backends.cudnn.benchmark", "_get_cudnn_benchmark", "_set_cudnn_benchmark")
    add("torch.backends.cudnn.deterministic", "_get_cudnn_deterministic", "_set_cudnn_deterministic")
    get_fp32 = getattr(c, "_get_fp32_precision_getter", None)
    set_fp32 = getattr(c, "_set_fp32_precision_setter", None)
    if get_fp32 is not None and set_fp32 is not None:
        for (backend, op), name in FP32_PRECISION.items():
            try:
                get_fp32(backend, op)
            except Exception:  # noqa: BLE001 - a pair this torch does not know
                continue
            flags[name] = (
                lambda b=backend, o=op: get_fp32(b, o),
                lambda v, b=backend, o=op: set_fp32(b, o, v),
            )
    return flags


class PrecisionPin:
    """The flags as they were before any candidate code ran; ``changed`` restores and names any change."""

    def __init__(self) -> None:
        self._flags = _flags()
        self.pinned: dict[str, Any] = {}
        for name, (read, _) in self._flags.items():
            try:
                self.pinned[name] = read()
            except Exception:  # noqa: BLE001 - unreadable here (no backend): not pinned
                continue

    def record(self) -> dict[str, Any]:
        """The pinned values, JSON-ready, for the result's ``env``."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.pinned.items()}

    def _now(self, name: str) -> Any:
        try:
            return self._flags[name][0]()
        except Exception as error:  # noqa: BLE001 - torch refuses to read a mix of old and new APIs
            return f"unreadable ({str(error)[:80]})"

    def changed(self) -> list[str]:
        """``name: pinned -> now`` for each flag that changed, each put back to its pinned value.

        Every flag is read before any is put back: restoring a legacy flag rewrites the new API's
        (``allow_tf32 = False`` sets ``fp32_precision`` to "ieee"), so reading while restoring named a
        candidate's ``fp32_precision = "tf32"`` as "-> 'ieee'", a value it never set. For the same
        reason one restore can move a flag already checked: the pass repeats until none differs.
        """
        now = {name: self._now(name) for name in self.pinned}
        changes = [f"{name}: {value!r} -> {now[name]!r}" for name, value in self.pinned.items() if now[name] != value]
        for _ in range(RESTORE_PASSES if changes else 0):
            moved = False
            for name, value in self.pinned.items():
                if self._now(name) != value:
                    moved = True
                    with contextlib.suppress(Exception):
                        self._flags[name][1](value)
            if not moved:
                break
        return changes
