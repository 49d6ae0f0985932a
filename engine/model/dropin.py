"""The runtime of an exported drop-in: build each kernel, swap it in for its modules, check it first.

This file is copied verbatim into every file ``cudaforge apply --export`` writes (and into the whole-model
check's candidate), so it imports nothing of cudaforge and must stand on torch alone. What it does with
``TASKS`` (each task's source), ``KERNELS`` (each ``ModelNew``'s source) and ``SWAPS`` (which module paths
each task replaces, and how those modules are called):

* ``kernel_module``/``task_module`` run a source as a module of its own (kernels are built, by their
  ``load_inline``, when the export is imported);
* ``optimize(model)`` builds, per module path, the kernel's ``ModelNew`` from its task's
  ``get_init_inputs()``, loads that module's weights into it by name (``match_state``), and puts it in
  the module's place with a ``forward`` that takes the module's own call: the task's tensor inputs in
  order, every other argument checked against the constant the kernel was written for (a different
  value raises :class:`SwapError` rather than computing something else);
* with ``verify=True`` each replacement is first checked against its task's ``Model`` given the same
  weights, on the task's ``get_inputs()``, at the dtype's tolerance (1e-4 for float32, 1e-2 for 16-bit);
* where a task takes tensors and returns one tensor, its kernel is called through a ``torch.library``
  custom op (``register_op``), so ``torch.compile`` of the optimized model keeps the kernel as one opaque
  node instead of breaking its graph at the extension's Python binding; the op's fake (shape) function runs
  the task's reference ``Model`` on the meta device. Elsewhere the kernel is called directly.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

import torch
import torch.nn as nn

TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


class SwapError(RuntimeError):
    """A kernel could not take a module's place: the message names the module path."""


_MODULES: dict[str, types.ModuleType] = {}


def _run_source(name: str, filename: str, source: str) -> types.ModuleType:
    if name not in _MODULES:
        module = types.ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        exec(compile(source, filename, "exec"), module.__dict__)
        _MODULES[name] = module
    return _MODULES[name]


def kernel_module(task: str, kernels: dict[str, str]) -> types.ModuleType:
    return _run_source(f"cudaforge_kernel_{task}", f"{task}_kernel.py", kernels[task])


def task_module(task: str, tasks: dict[str, str]) -> types.ModuleType:
    return _run_source(f"cudaforge_task_{task}", f"{task}_task.py", tasks[task])


def match_state(new: nn.Module, original: nn.Module, path: str) -> dict[str, str]:
    """For each of ``new``'s state_dict keys, the key of ``original``'s that holds its value.

    By name first; then the same names under one common prefix (``model.conv1.weight``); then the one
    tensor of the same shape whose last name part agrees. Anything left unmatched is a :class:`SwapError`.
    """
    want = {k: tuple(v.shape) for k, v in new.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in original.state_dict().items()}
    if all(have.get(k) == s for k, s in want.items()):
        return {k: k for k in want}
    prefixes = {k[: len(k) - len(h)] for k in want for h in have if k.endswith("." + h) and have[h] == want[k]}
    for prefix in sorted(prefixes, key=len):
        if all(have.get(k[len(prefix) :]) == s for k, s in want.items() if k.startswith(prefix)) and all(k.startswith(prefix) for k in want):
            return {k: k[len(prefix) :] for k in want}
    mapping: dict[str, str] = {}
    used: set[str] = set()
    for key, shape in want.items():
        if have.get(key) == shape and key not in used:
            mapping[key] = key
            used.add(key)
            continue
        tail = key.rsplit(".", 1)[-1]
        options = [h for h, s in have.items() if s == shape and h.rsplit(".", 1)[-1] == tail and h not in used]
        if len(options) != 1:
            raise SwapError(
                f"{path}: ModelNew's {key!r} {list(shape)} matches {len(options)} of the module's tensors "
                f"(the module has {', '.join(list(have)[:8])}); keep the reference Model's parameter names"
            )
        mapping[key] = options[0]
        used.add(options[0])
    return mapping


def load_weights(new: nn.Module, original: nn.Module, path: str) -> None:
    mapping = match_state(new, original, path)
    source = original.state_dict()
    new.load_state_dict({k: source[v] for k, v in mapping.items()}, strict=True)


def _flatten_call(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    sig = inspect.signature(function)
    bound = sig.bind(None, *args, **kwargs)
    bound.apply_defaults()
    flat: dict[str, Any] = {}
    for name, value in list(bound.arguments.items())[1:]:
        if sig.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            flat.update(value)
        else:
            flat[name] = value
    return flat


def _constant_text(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value)
    return repr(value)


_LIBRARIES: list[Any] = []  # torch.library registrations live as long as these objects
_CALLS: dict[int, Any] = {}  # op key -> the replacement's own forward
_SHAPES: dict[int, nn.Module] = {}  # op key -> the task's reference Model on the meta device
_OPS: dict[str, Any] = {}  # task -> its op


def _fake(key: int, inputs: list[torch.Tensor]) -> torch.Tensor:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        meta = [torch.empty(x.shape, dtype=x.dtype, device="meta") for x in inputs]
        with torch.no_grad():
            out = _SHAPES[key](*meta)
    return inputs[0].new_empty(out.shape, dtype=out.dtype)


def register_op(namespace: str, task: str, task_source: types.ModuleType) -> Any:
    """The custom op ``namespace::task(int key, Tensor[] inputs) -> Tensor``, or None where the task's
    output is not one tensor or torch cannot register it."""
    if task in _OPS:
        return _OPS[task]
    try:
        with torch.device("meta"):
            reference = task_source.Model(*task_source.get_init_inputs())
            with torch.no_grad():
                sample = reference(*task_source.get_inputs())
        if not isinstance(sample, torch.Tensor):
            _OPS[task] = None
            return None
        library = torch.library.Library(namespace, "FRAGMENT")
        library.define(f"{task}(int key, Tensor[] inputs) -> Tensor")
        library.impl(task, lambda key, inputs: _CALLS[key](*inputs), "CompositeExplicitAutograd")
        torch.library.register_fake(f"{namespace}::{task}", _fake, lib=library)
        _LIBRARIES.append(library)
        _OPS[task] = (getattr(getattr(torch.ops, namespace), task), reference)
    except Exception:  # noqa: BLE001 - no op: the kernel is called directly
        _OPS[task] = None
    return _OPS[task]


def adapted_forward(new: nn.Module, original: nn.Module, swap: dict[str, Any], path: str, op: Any = None) -> Any:
    """A ``forward`` for ``new`` that accepts the replaced module's calls (see the module docstring)."""
    own_forward = type(new).forward
    signature_of = type(original).forward
    inputs, constants = list(swap["inputs"]), dict(swap["constants"])
    call = own_forward.__get__(new)
    if op is not None:
        key = len(_CALLS)
        _CALLS[key], _SHAPES[key] = call, op[1]
        function = op[0]

        def call(*values: Any) -> Any:
            if all(isinstance(v, torch.Tensor) for v in values):
                return function(key, list(values))
            return own_forward(new, *values)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not kwargs and not constants and len(args) == len(inputs):
            return call(*args)
        flat = _flatten_call(signature_of, args, kwargs)
        for name, text in constants.items():
            if _constant_text(flat.get(name)) != text:
                raise SwapError(
                    f"{path} was called with {name}={_constant_text(flat.get(name))[:80]}; its kernel "
                    f"({swap['task']}) was written for {name}={text}"
                )
        return call(*(flat[name] for name in inputs))

    return forward


def _tensors(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def compare(expected: Any, got: Any) -> str | None:
    """None when every tensor of ``got`` matches ``expected`` at its dtype's tolerance, else what differs."""
    want, have = _tensors(expected), _tensors(got)
    if len(want) != len(have):
        return f"{len(have)} output tensors where the module gives {len(want)}"
    for index, (a, b) in enumerate(zip(want, have, strict=True)):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {index}: {b.dtype} {list(b.shape)} where the module gives {a.dtype} {list(a.shape)}"
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return f"output {index}: integer values differ"
            continue
        tol = TOLERANCE.get(a.dtype, 1e-4)
        a64, b64 = a.double(), b.double()
        if not torch.isfinite(b64).all() and torch.isfinite(a64).all():
            return f"output {index}: NaN or Inf"
        error = (a64 - b64).abs() - tol - tol * a64.abs()
        if error.numel() and float(error.max()) > 0:
            return f"output {index}: max abs error {float((a64 - b64).abs().max()):.3g} beyond {tol:g} + {tol:g}·|expected|"
    return None


def verify_swap(task: types.ModuleType, new: nn.Module, original: nn.Module, path: str, seed: int = 0) -> None:
    """``new`` against the task's ``Model`` given ``original``'s weights, on the task's random inputs."""
    device = next((t.device for t in original.state_dict().values()), torch.device("cpu"))
    state = torch.random.get_rng_state()
    try:
        with torch.device(device):
            reference = task.Model(*task.get_init_inputs()).to(device)
            reference.load_state_dict(original.state_dict())
            torch.manual_seed(seed)
            inputs = list(task.get_inputs())
    finally:
        torch.random.set_rng_state(state)
    with torch.no_grad():
        expected = reference(*inputs)
        got = type(new).forward(new, *inputs)
    problem = compare(expected, got)
    if problem:
        raise SwapError(f"{path}: its kernel does not compute what the module does with the model's weights ({problem})")


def swap_in(model: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, new)


def apply_swaps(
    model: nn.Module, swaps: list[dict[str, Any]], tasks: dict[str, str], kernels: dict[str, str],
    verify: bool = False, namespace: str | None = None,
) -> nn.Module:  # fmt: skip
    """Put each swap's kernel in place of its modules (all checked before any is swapped); the model."""
    ready: list[tuple[str, nn.Module]] = []
    for swap in swaps:
        task, kernel = task_module(swap["task"], tasks), kernel_module(swap["task"], kernels)
        op = register_op(namespace, swap["task"], task) if namespace else None
        for path in swap["paths"]:
            try:
                original = model.get_submodule(path)
            except AttributeError:
                raise SwapError(f"the model has no module {path!r}") from None
            device = next((t.device for t in original.state_dict().values()), torch.device("cpu"))
            with torch.device(device):
                new = kernel.ModelNew(*task.get_init_inputs()).to(device)
            load_weights(new, original, path)
            new.eval()
            if verify:
                verify_swap(task, new, original, path)
            new.forward = adapted_forward(new, original, swap, path, op)
            ready.append((path, new))
    for path, new in ready:
        swap_in(model, path, new)
    return model
