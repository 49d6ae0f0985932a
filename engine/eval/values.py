"""Nested values of tensors, moved and copied the same way by every stage of the worker."""

from __future__ import annotations

from typing import Any


def to_device(value: Any, device: Any) -> Any:
    """Tensors anywhere in nested lists/tuples moved to ``device``; anything else as it is."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def clone(value: Any) -> Any:
    """A private copy of every tensor in nested lists/tuples (a call may not see another's inputs)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    return value
