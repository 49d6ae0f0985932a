"""Which modules of a model are the same task, and which tasks are worth extracting (ARCHITECTURE.md §9).

**Identical modules.** Two modules are one task when they have the same class, the same parameters and
buffers (names, shapes, dtypes), were first called with the same shapes, dtypes and constants, and compute
the same function: module B, given A's weights and A's inputs, returns A's output. The last test is run,
not inferred from constructor arguments, since those differ in ways that change nothing (a decoder
layer's ``layer_idx``) and agree where behaviour differs (attributes set after construction).

**Selection.** Candidates are the modules the forward called, except the root and pure containers
(``ModuleList``, ``Sequential``, …). Groups are ranked by the device time of all their members; a group is
taken when none of its members contains or lies inside a member already taken, and when it is not a
*wrapper*, which is passed over for what it wraps: a module most of whose time (``WRAPPER_SHARE``) is one
group of modules directly inside it, or a *stack*: a module holding, in a container, two or more identical
modules that take at least ``STACK_SHARE`` of its time (a ``LlamaModel`` around its ``ModuleList`` of
decoder layers; a ``LlamaMLP``'s two identical projections are attributes, not a stack).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from engine.eval.compare import compare_outputs
from engine.model import values
from engine.model.trace import ModuleRecord

WRAPPER_SHARE = 0.8
STACK_SHARE = 0.5
# "The same function" is asked of two runs of one computation, so the bar is far under the check's
# (fp32 1e-4); it is not bitwise, because BLAS may order a sum differently for a copy (another alignment,
# another split over threads on a busy machine). A grouping it gets wrong cannot pass unseen: apply
# verifies every path's kernel against that path's own module.
SAME_FUNCTION_TOLERANCE = {"float32": 1e-5, "float64": 1e-9, "float16": 1e-3, "bfloat16": 1e-2}


@dataclass
class Group:
    """Identical modules: the first is the representative (its constructor call writes the task)."""

    paths: list[str]
    type: str
    total_ms: float = 0.0
    skipped: str | None = None  # why it cannot stand alone, once known
    notes: list[str] = field(default_factory=list)

    @property
    def representative(self) -> str:
        return self.paths[0]


def state_signature(module: nn.Module) -> tuple[Any, ...]:
    return tuple((name, tuple(t.shape), str(t.dtype)) for name, t in module.state_dict().items())


def call_key(record: ModuleRecord) -> str:
    args = ",".join(values.key(a) for a in record.args)
    kwargs = ",".join(f"{k}={values.key(v)}" for k, v in sorted(record.kwargs.items()))
    return f"{record.type}|{args}|{kwargs}|{values.key(record.output) if record.output else ''}"


def candidates(records: dict[str, ModuleRecord]) -> list[str]:
    """Paths a task may be made of: called, not the root, not a pure container."""
    return [p for p, r in records.items() if p and r.calls and not r.container]


def key_groups(model: nn.Module, records: dict[str, ModuleRecord], paths: list[str]) -> list[list[str]]:
    """Candidate paths by class, state signature and first-call signature, in module order."""
    modules = dict(model.named_modules())
    keyed: dict[tuple[Any, ...], list[str]] = {}
    for path in paths:
        keyed.setdefault((call_key(records[path]), state_signature(modules[path])), []).append(path)
    return list(keyed.values())


def _same_function(candidate: nn.Module, member: nn.Module, inputs: tuple[tuple[Any, ...], dict[str, Any]], output: Any) -> bool:
    """Whether ``candidate`` with ``member``'s weights maps ``member``'s inputs to its output."""
    try:
        twin = copy.deepcopy(candidate)
        twin.load_state_dict(member.state_dict())
        with torch.no_grad():
            got = twin(*inputs[0], **inputs[1])
    except Exception:  # noqa: BLE001 - what cannot even run is not the same function
        return False
    return compare_outputs(output, got, SAME_FUNCTION_TOLERANCE).passed


def partition(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], groups: list[list[str]], types: dict[str, str]) -> list[Group]:
    """Split each key group into groups of modules computing the same function (one forward, hooks)."""
    modules = dict(model.named_modules())
    result: dict[int, list[list[str]]] = {i: [] for i in range(len(groups))}
    pending = {modules[p]: (i, p) for i, g in enumerate(groups) if len(g) > 1 for p in g}
    for i, g in enumerate(groups):
        if len(g) == 1:
            result[i] = [g]
    seen: set[str] = set()
    captured: dict[nn.Module, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def before(module: nn.Module, call_args: tuple[Any, ...], call_kwargs: dict[str, Any]) -> None:
        if module in pending and pending[module][1] not in seen:
            captured[module] = (_clone(call_args), _clone(call_kwargs))

    def after(module: nn.Module, _args: Any, _kwargs: Any, output: Any) -> None:
        if module not in pending or pending[module][1] in seen or module not in captured:
            return
        index, path = pending[module]
        seen.add(path)
        inputs = captured.pop(module)
        for bucket in result[index]:
            if _same_function(modules[bucket[0]], module, inputs, output):
                bucket.append(path)
                return
        result[index].append([path])

    handles = [h for m in pending for h in (m.register_forward_pre_hook(before, with_kwargs=True), m.register_forward_hook(after, with_kwargs=True))]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    order = {p: n for n, p in enumerate(modules)}
    found = [Group(sorted(b, key=order.__getitem__), types[b[0]]) for buckets in result.values() for b in buckets]
    return sorted(found, key=lambda g: order[g.representative])


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _inside(path: str, ancestor: str) -> bool:
    return ancestor == "" or path.startswith(ancestor + ".")


def _overlaps(path: str, taken: set[str]) -> bool:
    return any(path == t or _inside(path, t) or _inside(t, path) for t in taken)


def _direct_members(group: Group, parent: str, records: dict[str, ModuleRecord], stacked: bool = False) -> list[str]:
    """Members of ``group`` inside ``parent`` with only containers between them and it (``stacked``: at
    least one container)."""
    found = []
    for path in group.paths:
        if not _inside(path, parent) or path == parent:
            continue
        between = path[len(parent) + 1 if parent else 0 :].split(".")[:-1]
        prefix, direct = parent, True
        for part in between:
            prefix = f"{prefix}.{part}" if prefix else part
            if not records[prefix].container:
                direct = False
                break
        if direct and (between or not stacked):
            found.append(path)
    return found


def is_wrapper(group: Group, groups: list[Group], records: dict[str, ModuleRecord], total_ms: dict[str, float]) -> bool:
    parent = group.representative
    own = total_ms.get(parent, 0.0)
    if own <= 0:
        return False
    for other in groups:
        if other is group:
            continue
        inner = sum(total_ms.get(p, 0.0) for p in _direct_members(other, parent, records))
        if inner >= WRAPPER_SHARE * own:
            return True
        stack = _direct_members(other, parent, records, stacked=True)
        if len(stack) >= 2 and sum(total_ms.get(p, 0.0) for p in stack) >= STACK_SHARE * own:
            return True
    return False


def select(
    groups: list[Group], records: dict[str, ModuleRecord], total_ms: dict[str, float], top: int,
    leaves: bool = False, wanted: list[str] | None = None,
) -> list[Group]:  # fmt: skip
    """The groups to extract, heaviest first: ``wanted`` paths' groups, else the ``top`` heaviest."""
    for group in groups:
        group.total_ms = sum(total_ms.get(p, 0.0) for p in group.paths)
    if wanted:
        return [g for g in groups if any(p in g.paths for p in wanted)]
    taken: set[str] = set()
    chosen: list[Group] = []
    for group in sorted(groups, key=lambda g: -g.total_ms):
        if len(chosen) >= top:
            break
        if group.skipped or (leaves and not records[group.representative].leaf) or group.total_ms <= 0:
            continue
        if any(_overlaps(p, taken) for p in group.paths):
            continue
        if not leaves and is_wrapper(group, groups, records, total_ms):
            continue
        chosen.append(group)
        taken |= set(group.paths)
    return chosen


def identical(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], records: dict[str, ModuleRecord]) -> list[Group]:
    """The groups of identical modules among the candidates (one forward for the behaviour test)."""
    types = {path: record.type for path, record in records.items()}
    return partition(model, args, kwargs, key_groups(model, records, candidates(records)), types)
