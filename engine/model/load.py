"""Build the user's model and its example inputs from a :class:`ModelSpec` (child process only).

The user's own code is trusted (as a task file is): it is imported here, in the child, never in the
sandboxed evaluation worker's place. A model file runs as a script would: its folder first on
``sys.path``, so its sibling modules import. Every failure becomes a one-line :class:`ModelError`
naming the user's file and line, because a traceback through cudaforge's frames says nothing useful.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn as nn

from engine.model import initargs
from engine.model.spec import ModelError, ModelSpec
from engine.tasks import import_module_from_source


@dataclass
class Loaded:
    """The model on its device in eval mode, one example batch, and the user module it came from."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    user_module: ModuleType | None = None  # the model file, imported (kernelbench, file)
    user_source: str | None = None
    notes: list[str] = field(default_factory=list)


def where(error: BaseException, files: tuple[str, ...]) -> str:
    """`` (model.py:12)`` for the innermost frame in one of the user's files, else ``""``."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in files]
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def describe_error(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"


def _import_file(path: str) -> tuple[ModuleType, str]:
    folder = str(Path(path).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    source = Path(path).read_text()
    try:
        return import_module_from_source(source, path), source
    except Exception as error:
        raise ModelError(f"importing {path} failed: {describe_error(error)}{where(error, (path,))}") from None


def _callable(module: ModuleType, name: str, origin: str) -> Any:
    value = getattr(module, name, None)
    if not callable(value):
        raise ModelError(f"{origin} has no callable `{name}`")
    return value


def cast(value: Any, dtype: torch.dtype, device: torch.device) -> Any:
    """Floating tensors (nested in tuples, lists, dicts) cast to ``dtype``; every tensor moved to ``device``."""
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(cast(v, dtype, device) for v in value)
    if isinstance(value, dict):
        return {k: cast(v, dtype, device) for k, v in value.items()}
    return value


def _as_call(batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(batch, dict):
        return (), dict(batch)
    if isinstance(batch, (list, tuple)):
        return tuple(batch), {}
    return (batch,), {}


def _inputs(spec: ModelSpec, user: ModuleType | None) -> Any:
    if spec.kind == "kernelbench":
        assert user is not None
        return list(user.get_inputs())
    if spec.inputs_file:
        module = user if user is not None and spec.inputs_file == spec.file else _import_file(spec.inputs_file)[0]
        function = _callable(module, spec.inputs_function or "", spec.inputs_file)
        try:
            return function()
        except Exception as error:
            raise ModelError(
                f"the inputs function {spec.inputs_function} failed: {describe_error(error)}"
                f"{where(error, (spec.inputs_file,))}"
            ) from None
    batch = []
    for shape in spec.input_shapes:
        dtype = getattr(torch, shape.dtype)
        if dtype.is_floating_point:
            batch.append(torch.randn(shape.dims, dtype=dtype))
        elif dtype == torch.bool:
            batch.append(torch.rand(shape.dims) < 0.5)
        else:
            batch.append(torch.randint(0, 100, shape.dims, dtype=dtype))
    return batch


def _out_of_memory(error: BaseException) -> bool:
    """An allocation the device refused: CUDA raises its own type, the CPU allocator a RuntimeError."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(error)
    )


def _construct(spec: ModelSpec) -> tuple[nn.Module, ModuleType | None, str | None]:
    user, source = (None, None)
    if spec.file:
        user, source = _import_file(spec.file)
    files = tuple(f for f in (spec.file,) if f)
    try:
        # Built straight on the device: a model larger than the host's memory, or than the device's,
        # ends here with one clear line instead of the host's out-of-memory killer.
        with initargs.recording(), torch.device(spec.device):
            if spec.kind == "kernelbench":
                assert user is not None
                model = user.Model(*user.get_init_inputs())
            elif spec.kind == "file":
                assert user is not None
                model = _callable(user, spec.factory or "", spec.file or "")()
            else:
                try:
                    module = importlib.import_module(spec.module or "")
                except Exception as error:
                    raise ModelError(f"cannot import {spec.module}: {describe_error(error)}") from None
                model = _callable(module, spec.factory or "", spec.module or "")()
    except ModelError:
        raise
    except Exception as error:
        if _out_of_memory(error):
            raise ModelError(f"the model does not fit on {spec.device}: {describe_error(error)}") from None
        raise ModelError(f"building the model failed: {describe_error(error)}{where(error, files)}") from None
    if not isinstance(model, nn.Module):
        raise ModelError(f"{spec.target} returned a {type(model).__name__}, not a torch.nn.Module")
    return model, user, source


def load(spec: ModelSpec) -> Loaded:
    """The model and inputs of ``spec`` on its device and dtype; :class:`ModelError` for anything wrong."""
    torch.manual_seed(spec.seed)
    device = torch.device(spec.device)
    dtype = getattr(torch, spec.torch_dtype)
    model, user, source = _construct(spec)
    torch.manual_seed(spec.seed)
    batch = _inputs(spec, user)
    try:
        model = model.to(device=device, dtype=dtype).eval()
    except (torch.OutOfMemoryError, RuntimeError) as error:
        if not _out_of_memory(error):
            raise
        raise ModelError(f"the model does not fit on {device}: {describe_error(error)}") from None
    args, kwargs = _as_call(cast(batch, dtype, device))
    return Loaded(model, args, kwargs, user, source)


def run_once(loaded: Loaded, spec: ModelSpec) -> Any:
    """One forward on the example batch; :class:`ModelError` naming the user's line when it fails."""
    files = tuple(f for f in (spec.file, spec.inputs_file) if f)
    try:
        with torch.no_grad():
            return loaded.model(*loaded.args, **loaded.kwargs)
    except Exception as error:
        if _out_of_memory(error):
            raise ModelError(f"the model does not fit on {spec.device} with these inputs: {describe_error(error)}") from None
        raise ModelError(f"the model failed on its inputs: {describe_error(error)}{where(error, files)}") from None
