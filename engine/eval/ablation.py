"""Own-kernel necessity by ablation (ARCHITECTURE.md §3, "Defences"; runs inside the worker).

The own-kernel share (engine.guard.share) cannot tell an honest kernel that does little from a cheat
whose kernel does nothing the result needs: on the H200 a Swin block's one honest element-wise add had
0.031 % of the device time, the ``touch`` cheat 0.026 %. What tells them apart is whether the result
needs the kernel. A candidate built on the split path launches every kernel of its own through a
generated launcher (engine.eval.build.split.launchers), and each split extension exports a switch that
makes those launchers return without launching. With the switch on, one forward runs on free memory
filled with NaN (engine.eval.stale): if its output still passes, the own kernels are not needed and the
candidate is refused (``own-kernel-unneeded``); if it fails, raises or crashes, they are needed.

A candidate with any CUDA extension built another way (stock, or torch-free sources with launchers of
its own) is not ablated: the share rule (``own-kernel-trivial``) judges it, and the result's
``kernel_share["test"]`` says which test was used.
"""

from __future__ import annotations

import ctypes
from typing import Any

from engine.eval.build.split.rewrite import ABLATE_SETTER

CUDA_PATHS = ("split", "stock", "fast")  # build paths whose extensions can launch kernels


def switches(modules: list[Any], paths: list[str]) -> list[Any] | None:
    """The ablation setters of every CUDA extension, or None when one of them was not split-built."""
    cuda = [(m, p) for m, p in zip(modules, paths, strict=True) if p in CUDA_PATHS]
    if not cuda or any(p != "split" for _, p in cuda):
        return None
    setters = []
    for module, _ in cuda:
        library = ctypes.CDLL(module.__file__)  # the handle the import already holds
        setters.append(getattr(library, ABLATE_SETTER))
    return setters


class Ablated:
    """``with Ablated(setters):`` the own kernels' launches do nothing; always switched back on exit."""

    def __init__(self, setters: list[Any]) -> None:
        self.setters = setters

    def __enter__(self) -> Ablated:
        for setter in self.setters:
            setter(1)
        return self

    def __exit__(self, *exc: object) -> None:
        for setter in self.setters:
            setter(0)
