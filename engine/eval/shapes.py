"""Shape generalisation: the task's sizes perturbed, correctness re-checked (ARCHITECTURE.md §3, "Defences").

Agents hard-code the task's sizes (``#define N 16384``, a grid computed for one batch). A kernel
correct only at the shape ``get_inputs()`` draws is reported as such: the worker changes the task
module's integer sizes that only ``get_inputs`` reads (never one the model's constructor or methods
read, so the models stay as built) to half, odd and odd-half values, and checks the candidate again
at each shape the reference accepts. The outcome is recorded (``EvalResult.shapes``); under the default
policy it never refuses, ``[guard] refuse = ["shape-specific"]`` makes a failure a refusal.
"""

from __future__ import annotations

import inspect
from types import CodeType, ModuleType
from typing import Any


def _names(code: CodeType) -> set[str]:
    """Global names a function's code (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _names(const)
    return names


def _class_names(cls: type) -> set[str]:
    names: set[str] = set()
    for member in vars(cls).values():
        function = getattr(member, "__func__", member)
        if inspect.isfunction(function):
            names |= _names(function.__code__)
    return names


def perturbable_sizes(task: ModuleType) -> dict[str, int]:
    """Module-level integers ``get_inputs`` reads and neither ``get_init_inputs`` nor ``Model`` does."""
    get_inputs = getattr(task, "get_inputs", None)
    if not inspect.isfunction(get_inputs):
        return {}
    used = _names(get_inputs.__code__)
    fixed: set[str] = set()
    init = getattr(task, "get_init_inputs", None)
    if inspect.isfunction(init):
        fixed |= _names(init.__code__)
    model = getattr(task, "Model", None)
    if isinstance(model, type):
        fixed |= _class_names(model)
    sizes = {}
    for name in sorted(used - fixed):
        value = getattr(task, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            sizes[name] = value
    return sizes


def _odd(n: int) -> int:
    return n - 1 if n % 2 == 0 else n


def variants(sizes: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """The shapes to try: every size halved, made odd, halved and made odd; duplicates dropped."""
    out: list[tuple[str, dict[str, int]]] = []
    seen = [dict(sizes)]
    for label, change in (
        ("half", lambda n: max(1, n // 2)),
        ("odd", _odd),
        ("odd-half", lambda n: max(1, _odd(n // 2))),
    ):
        shape = {name: change(n) for name, n in sizes.items()}
        if shape not in seen:
            seen.append(shape)
            out.append((label, shape))
    return out


class SizesSet:
    """``with SizesSet(task, shape):`` the task module's sizes changed, put back on exit."""

    def __init__(self, task: ModuleType, shape: dict[str, int]) -> None:
        self.task, self.shape = task, shape
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> SizesSet:
        for name, value in self.shape.items():
            self.saved[name] = getattr(self.task, name)
            setattr(self.task, name, value)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, value in self.saved.items():
            setattr(self.task, name, value)


def cell(record: dict[str, Any] | None) -> str:
    """``2/3``: correct at 2 of the 3 other shapes checked; "" when none was checked (table cells)."""
    checked = [v for v in (record or {}).get("variants") or [] if v.get("status") in ("correct", "incorrect", "error")]
    if not checked:
        return ""
    return f"{sum(v['status'] == 'correct' for v in checked)}/{len(checked)}"


def summary(record: dict[str, Any] | None) -> str:
    """``correct at 2/3 other shapes`` (or why none were checked), for tables and panes."""
    if not record:
        return ""
    checked = [v for v in record.get("variants", []) if v.get("status") in ("correct", "incorrect", "error")]
    if not checked:
        return f"shapes: {record.get('note') or 'none checked'}"
    passed = sum(1 for v in checked if v["status"] == "correct")
    return f"correct at {passed}/{len(checked)} other shapes"
