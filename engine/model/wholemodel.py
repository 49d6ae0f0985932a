"""Source text for the whole-model check and the drop-in export (ARCHITECTURE.md §9).

Three files are written from one set of pieces, so what is checked is what is exported:

* the **whole-model task**: the user's model as a KernelBench task (``Model`` builds it the way the
  profile did, in eval mode and the chosen dtype; ``get_inputs()`` is its example batch drawn afresh);
* the **export** (``--export FILE.py``): ``engine/model/dropin.py`` verbatim, then ``TASKS``, ``KERNELS``,
  ``SWAPS`` and ``optimize(model, verify=False)``; it imports nothing of cudaforge;
* the **whole-model candidate**: the task's model-building preamble, the export, and a ``ModelNew`` that
  builds the same model and calls ``optimize(..., verify=True)`` on it.

The evaluator then judges candidate against task like any pair (sandbox, trials, defences, timing).
Outputs are reduced to their tensors (a transformers ``ModelOutput`` to a dict, a cache object dropped),
because only tensors can be compared. The user's files are carried inside the generated sources: the
evaluation's sandbox cannot read the user's home, where they usually are.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.model.spec import ModelSpec

DROPIN = Path(__file__).with_name("dropin.py")


@dataclass
class Swap:
    """One task's kernel and the module paths it replaces."""

    task: str
    paths: list[str]
    inputs: list[str]
    constants: dict[str, str]
    task_source: str
    kernel_source: str

    def data(self) -> dict[str, Any]:
        return {"task": self.task, "paths": self.paths, "inputs": self.inputs, "constants": self.constants}


PLAIN = '''
def _plain(value):
    """The tensors of an output: tuples and lists kept, dicts (a ModelOutput too) as dicts, the rest dropped."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return tuple(v for v in items if v is not None) if isinstance(value, tuple) else [v for v in items if v is not None]
    if isinstance(value, dict):
        items = {k: _plain(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v is not None}
    return None
'''

LOAD_FILE = '''
def _load_file(name, filename, source):
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)
    return module
'''


def _model_preamble(spec: ModelSpec) -> list[str]:
    """Imports, the user's files carried as text, ``_build()`` and ``_batch()``."""
    lines = ["import importlib", "import sys", "import types", "", "import torch", "import torch.nn as nn", LOAD_FILE]
    files: dict[str, str] = {}
    for path in filter(None, (spec.file, spec.inputs_file)):
        if path not in files:
            name = f"cudaforge_user_{len(files)}"
            files[path] = name
            lines.append(f"{name} = _load_file({name!r}, {path!r}, {Path(path).read_text()!r})")
    if spec.kind == "kernelbench":
        build, batch = f"{files[spec.file]}.Model(*{files[spec.file]}.get_init_inputs())", f"{files[spec.file]}.get_inputs()"  # type: ignore[index]
    elif spec.kind == "file":
        build = f"{files[spec.file]}.{spec.factory}()"  # type: ignore[index]
        batch = ""
    else:
        build, batch = f"getattr(importlib.import_module({spec.module!r}), {spec.factory!r})()", ""
    if not batch:
        if spec.inputs_file:
            batch = f"{files[spec.inputs_file]}.{spec.inputs_function}()"
        else:
            tensors = []
            for shape in spec.input_shapes:
                dims = tuple(shape.dims)
                if shape.dtype == "bool":
                    tensors.append(f"torch.rand({dims}) < 0.5")
                elif shape.dtype.startswith(("int", "uint")):
                    tensors.append(f"torch.randint(0, 100, {dims}, dtype=torch.{shape.dtype})")
                else:
                    tensors.append(f"torch.randn({dims}, dtype=torch.{shape.dtype})")
            batch = "[" + ", ".join(tensors) + "]"
    lines += [
        f"DTYPE = torch.{spec.torch_dtype}", "", "", "def _build():", f"    return {build}.to(DTYPE).eval()", "", "",
        "def _batch():", f"    return {batch}", PLAIN,
    ]  # fmt: skip
    return lines


def _model_class(name: str, base_init: str, keywords: list[str]) -> list[str]:
    """``Model``/``ModelNew``: the built model, called with the batch's positional and keyword values."""
    count = len(keywords)
    call = f"*args[: len(args) - {count}], **dict(zip({keywords!r}, args[len(args) - {count}:]))" if count else "*args"
    return [
        f"class {name}(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        self.model = {base_init}",
        "",
        "    def forward(self, *args):",
        f"        return _plain(self.model({call}))",
    ]


GET_INPUTS = '''
def _cast(value):
    if isinstance(value, torch.Tensor):
        return value.to(DTYPE) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v) for k, v in value.items()}
    return value


def get_inputs():
    batch = _cast(_batch())
    if isinstance(batch, dict):
        return list(batch.values())
    return list(batch) if isinstance(batch, (list, tuple)) else [batch]


def get_init_inputs():
    return []
'''


def whole_task(spec: ModelSpec, keywords: list[str]) -> str:
    """The user's model as one KernelBench task (the whole-model check's reference)."""
    head = f'"""{spec.target} ({spec.dtype}) as one KernelBench task: the reference of cudaforge apply\'s whole-model check."""'
    return "\n".join([head, "", *_model_preamble(spec), "", *_model_class("Model", "_build()", keywords), "", GET_INPUTS])


def export(spec: ModelSpec, swaps: list[Swap], verified: str = "") -> str:
    """The drop-in module: ``from FILE import optimize; model = optimize(model)``."""
    listing = "\n".join(f"    {s.task}: {', '.join(s.paths)}" for s in swaps)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = f'''"""Kernels for {spec.target} ({spec.dtype}), exported by cudaforge apply on {stamp}.

Use:
    from this_module import optimize
    model = optimize(model)               # each listed module replaced by its kernel, weights kept
    model = optimize(model, verify=True)  # first checks each kernel against its module on random inputs

The model must be in eval mode and {spec.dtype}; a call unlike the one a kernel was written for raises
SwapError. Importing this file builds the kernels (torch's load_inline, cached by content).
{verified}
Replaced:
{listing}
"""'''
    dropin = DROPIN.read_text().split('"""', 2)[2].replace("from __future__ import annotations\n", "").lstrip("\n")
    if len({s.task for s in swaps}) != len(swaps):
        raise ValueError(f"two swaps share a task name ({', '.join(s.task for s in swaps)}): TASKS and KERNELS are keyed by it")
    tasks = {s.task: s.task_source for s in swaps}
    kernels = {s.task: s.kernel_source for s in swaps}
    data = json.dumps([s.data() for s in swaps], indent=4)
    namespace = "cudaforge_" + hashlib.sha256((data + repr(kernels)).encode()).hexdigest()[:10]
    return "\n".join([
        head, "", dropin.rstrip(), "", "",
        f"TASKS = {tasks!r}", "", f"KERNELS = {kernels!r}", "", f"SWAPS = {data}", "",
        "for _task in KERNELS:  # build every kernel now, at import", "    kernel_module(_task, KERNELS)", "", "",
        "def optimize(model, verify=False):",
        '    """Swap the kernels in for their modules (all checked first when ``verify``); returns the model."""',
        f"    return apply_swaps(model, SWAPS, TASKS, KERNELS, verify=verify, namespace={namespace!r})", "",
    ])  # fmt: skip


def candidate(spec: ModelSpec, swaps: list[Swap], keywords: list[str]) -> str:
    """The whole-model candidate: the same model with the kernels swapped in (verified first)."""
    return candidate_from_export(spec, export(spec, swaps), keywords)


def candidate_from_export(spec: ModelSpec, export_text: str, keywords: list[str]) -> str:
    """The whole-model candidate around an export's text (``apply --verify`` passes the written file's)."""
    body = export_text.split('"""', 2)[2]
    head = f'"""{spec.target} with cudaforge kernels swapped in: the candidate of apply\'s whole-model check."""'
    preamble = _model_preamble(spec)
    model_new = _model_class("ModelNew", "optimize(_build(), verify=True)", keywords)
    return "\n".join([head, "", *preamble, body, "", *model_new, ""])
