"""One traced forward of the user's model: per module path, what it was called with and what it costs.

Forward hooks on every module record, for the first call, the arguments and output (described by
``engine.model.values``) and the distinct bytes they and the module's parameters take; a FLOP-counting
torch-function mode (the counts of ``engine.eval.floor``: matmuls, convolutions, attention) attributes
each call to the innermost module running and to every module around it. Timing happens in another pass
(``engine.model.timing``): the mode's Python overhead would distort it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from engine.eval.floor import call_flops, total_bytes
from engine.model import values

CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential, nn.ParameterList, nn.ParameterDict)


def type_name(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class ModuleRecord:
    """One module path of the model, as the traced forward saw it (JSON-able)."""

    path: str
    type: str
    children: list[str]
    container: bool
    params: int  # elements of every parameter in the subtree
    param_bytes: int
    calls: int = 0
    args: list[dict[str, Any]] = field(default_factory=list)
    kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    output: dict[str, Any] | None = None
    io_bytes: int = 0  # first call: inputs and outputs, distinct storages once
    flops: int = 0  # per forward, this module and everything it calls
    self_flops: int = 0  # per forward, outside any child module

    @property
    def leaf(self) -> bool:
        return not self.children

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Flops(TorchFunctionMode):
    """Counts FLOPs per torch call and hands each count to the module stack's owner."""

    def __init__(self, stack: list[ModuleRecord]) -> None:
        super().__init__()
        self.stack = stack

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.stack:
            try:
                flops = call_flops(getattr(func, "__name__", ""), tuple(args), kwargs, out)
            except Exception:  # noqa: BLE001 - an unusual signature is not counted
                flops = 0
            if flops:
                self.stack[-1].self_flops += flops
                for record in self.stack:
                    record.flops += flops
        return out


def module_records(model: nn.Module) -> dict[str, ModuleRecord]:
    """A record per module path (the root is ``""``), before any call."""
    records: dict[str, ModuleRecord] = {}
    for path, module in model.named_modules():
        state = [*module.parameters(), *module.buffers()]
        records[path] = ModuleRecord(
            path=path,
            type=type_name(module),
            children=[f"{path}.{name}" if path else name for name, _ in module.named_children()],
            container=isinstance(module, CONTAINERS),
            params=sum(p.numel() for p in module.parameters()),
            param_bytes=total_bytes(state),
        )
    return records


def trace(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, ModuleRecord], Any]:
    """Run one forward with the hooks and the FLOP mode; the records and the model's output."""
    records = module_records(model)
    by_module = {module: records[path] for path, module in model.named_modules()}
    stack: list[ModuleRecord] = []

    def before(module: nn.Module, call_args: tuple[Any, ...], call_kwargs: dict[str, Any]) -> None:
        record = by_module.get(module)
        if record is None:
            return
        record.calls += 1
        if record.calls == 1:
            record.args = [values.describe(a) for a in call_args]
            record.kwargs = {k: values.describe(v) for k, v in call_kwargs.items()}
            record.io_bytes = total_bytes([list(call_args), list(call_kwargs.values())])
        stack.append(record)

    def after(module: nn.Module, call_args: tuple[Any, ...], call_kwargs: dict[str, Any], output: Any) -> None:
        record = by_module.get(module)
        if record is None:
            return
        if stack and stack[-1] is record:
            stack.pop()
        if record.calls == 1:
            record.output = values.describe(output)
            record.io_bytes += total_bytes(output)

    handles = []
    for module in by_module:
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        with torch.no_grad(), _Flops(stack):
            output = model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return records, output
