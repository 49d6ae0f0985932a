"""Load and describe KernelBench-format task files.

A task file defines ``class Model(nn.Module)`` (the PyTorch reference), ``get_inputs()`` and
``get_init_inputs()``. Tasks are the user's own trusted code, so importing one in-process is
fine; candidate kernels never are (they run only in the evaluation worker).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class TaskError(Exception):
    """A task file that cannot be used; the message names what is wrong."""


@dataclass
class TensorSpec:
    """Shape and dtype of one input, or the repr of a non-tensor input."""

    shape: tuple[int, ...] | None
    dtype: str | None
    value: str | None = None

    def describe(self) -> str:
        if self.shape is None:
            return f"{self.value}"
        dims = "×".join(str(d) for d in self.shape) or "scalar"
        return f"{self.dtype} [{dims}]"


@dataclass
class Task:
    """A loaded task: its source and where it came from."""

    name: str
    path: Path | None
    source: str
    inputs: list[TensorSpec] = field(default_factory=list)
    init_inputs: list[str] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def missing_names(source: str) -> list[str]:
    """Names of ``REQUIRED_NAMES`` not defined at the top level of ``source`` (syntax errors raise)."""
    tree = ast.parse(source)
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    defined.add(target.id)
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            for alias in node.names:
                defined.add((alias.asname or alias.name).split(".")[0])
    return [name for name in REQUIRED_NAMES if name not in defined]


def check_task_source(source: str, label: str = "task") -> None:
    """Raise ``TaskError`` for a syntax error or a missing required name, without running anything."""
    try:
        missing = missing_names(source)
    except SyntaxError as error:
        raise TaskError(f"{label} has a syntax error at line {error.lineno}: {error.msg}") from None
    if missing:
        raise TaskError(
            f"{label} does not define {', '.join(missing)} (a KernelBench task needs {', '.join(REQUIRED_NAMES)})"
        )


def import_module_from_source(source: str, filename: str, module_name: str | None = None) -> ModuleType:
    """Execute ``source`` as a fresh module registered under a unique name."""
    name = module_name or f"cudaforge_mod_{uuid.uuid4().hex[:12]}"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=filename)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = filename
    sys.modules[name] = module
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)
    return module


def load_task(path: str | Path, describe: bool = True) -> Task:
    """Load a task file: check it statically, import it, and describe its inputs.

    ``describe`` calls ``get_inputs()`` under the ``meta`` device, so shapes and dtypes are known
    without allocating the (often gigabyte-sized) inputs.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"no such task file: {path}")
    source = path.read_text()
    return load_task_source(source, name=path.stem, path=path, describe=describe)


def load_task_source(source: str, name: str, path: Path | None = None, describe: bool = True) -> Task:
    """Like ``load_task`` for a source string (e.g. ``task.py`` read from a session commit)."""
    label = str(path) if path else name
    check_task_source(source, label)
    try:
        module = import_module_from_source(source, label)
    except Exception as error:
        tail = traceback.format_exception_only(type(error), error)[-1].strip()
        raise TaskError(f"{label} failed to import: {tail}") from None
    for required in REQUIRED_NAMES:
        if not hasattr(module, required):
            raise TaskError(f"{label} does not define {required}")
    task = Task(name=name, path=path, source=source)
    if describe:
        task.inputs, task.init_inputs = describe_module(module, label)
    return task


def describe_module(module: ModuleType, label: str) -> tuple[list[TensorSpec], list[str]]:
    """Shapes/dtypes of ``get_inputs()`` (on the meta device) and reprs of ``get_init_inputs()``."""
    import torch

    try:
        init_inputs = [_short_repr(v) for v in module.get_init_inputs()]
    except Exception as error:
        raise TaskError(f"{label}: get_init_inputs() failed: {error}") from None
    try:
        with torch.device("meta"):
            values = list(module.get_inputs())
    except Exception:
        values = None  # tasks that build inputs from real data: describe nothing rather than fail
    specs: list[TensorSpec] = []
    for value in values or []:
        if isinstance(value, torch.Tensor):
            specs.append(TensorSpec(shape=tuple(value.shape), dtype=str(value.dtype).replace("torch.", "")))
        else:
            specs.append(TensorSpec(shape=None, dtype=None, value=_short_repr(value)))
    return specs, init_inputs


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
