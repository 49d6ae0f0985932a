"""The heaviest modules of a user's model as KernelBench tasks, checked to stand alone (child process).

For each selected group (``engine.model.groups``) the representative's task is written
(``engine.model.taskgen``) and then proven: built from ``get_init_inputs()``, given the representative's
weights by name, and called on the very tensors the representative got in the model, it must return
the representative's output (within the dtype's tolerance), and its own ``get_inputs()`` must run. A
group that fails any step is listed with the reason and the next heaviest is tried, so a module that
depends on state outside its constructor and inputs (attributes set later, data-dependent control flow
on values the task does not reproduce, closures) is reported, never dropped and never written broken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from engine.eval.compare import compare_outputs
from engine.model import groups as grouping
from engine.model import initargs, taskgen
from engine.model.groups import Group
from engine.model.load import Loaded, describe_error
from engine.model.spec import ModelSpec
from engine.model.trace import ModuleRecord
from engine.tasks import import_module_from_source

MAX_ROUNDS = 6


@dataclass
class Captured:
    """A module's first call in the model: its inputs and output, cloned."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any


def capture(model: nn.Module, loaded: Loaded, paths: list[str]) -> dict[str, Captured]:
    """One forward, keeping the first call of each module in ``paths``."""
    modules = dict(model.named_modules())
    wanted = {modules[p]: p for p in paths}
    found: dict[str, Captured] = {}
    inputs: dict[str, tuple[Any, Any]] = {}

    def before(module: nn.Module, args: Any, kwargs: Any) -> None:
        path = wanted.get(module)
        if path is not None and path not in found and path not in inputs:
            inputs[path] = (grouping._clone(args), grouping._clone(kwargs))

    def after(module: nn.Module, _args: Any, _kwargs: Any, output: Any) -> None:
        path = wanted.get(module)
        if path is not None and path in inputs and path not in found:
            args, kwargs = inputs[path]
            found[path] = Captured(args, kwargs, grouping._clone(output))

    handles = [h for m in wanted for h in (m.register_forward_pre_hook(before, with_kwargs=True), m.register_forward_hook(after, with_kwargs=True))]
    try:
        with torch.no_grad():
            model(*loaded.args, **loaded.kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return found


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def task_name(group: Group, used: set[str]) -> str:
    base = snake(group.type.rsplit(".", 1)[-1]) or "module"
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}_{n}"
    used.add(name)
    return name


def constructor_call(model: nn.Module, group: Group) -> initargs.InitCall:
    """The representative's constructor call, or a same-shaped twin's (a module made by deepcopy has none)."""
    modules = dict(model.named_modules())
    own = initargs.init_call(modules[group.representative])
    if own is not None and (own.args or own.kwargs or _takes_no_arguments(type(modules[group.representative]))):
        return own
    target = modules[group.representative]
    signature = grouping.state_signature(target)
    for module in modules.values():
        call = initargs.init_call(module)
        if type(module) is type(target) and call is not None and (call.args or call.kwargs) and grouping.state_signature(module) == signature:
            return call
    raise taskgen.NotStandalone("its constructor's arguments were not seen (a class with its own __new__, or a copy)")


def _takes_no_arguments(cls: type) -> bool:
    import inspect

    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def describe_group(spec: ModelSpec, group: Group, device_ms: float, gpu: str | None) -> str:
    paths = ", ".join(group.paths[:6]) + (f", … ({len(group.paths)} in all)" if len(group.paths) > 6 else "")
    where = f"on {gpu}" if gpu else f"on {spec.device}"
    share = f"{100 * group.total_ms / device_ms:.1f}%" if device_ms else "?"
    count = f"{len(group.paths)} identical {group.type.rsplit('.', 1)[-1]} modules" if len(group.paths) > 1 else f"a {group.type.rsplit('.', 1)[-1]} module"
    return f"""
        {paths} of {spec.target}: {count}, {share} of the model's device time {where} ({spec.dtype}).
        Extracted by cudaforge as a KernelBench task; the model runs in eval mode (inference).

        Model is the module itself (a subclass of its class, built from the arguments the model built it
        with). ModelNew takes the same constructor arguments and forward inputs. When the kernel is applied
        to the model (cudaforge apply), ModelNew's parameters and buffers are loaded by name from each
        module's state_dict: keep Model's names (see Model().state_dict().keys()).
    """


def bound_inputs(module: nn.Module, captured: Captured, names: list[str]) -> list[Any]:
    """The captured call's values for the task's input names, in the task's order."""
    import inspect

    sig = inspect.signature(type(module).forward)
    bound = sig.bind(None, *captured.args, **captured.kwargs).arguments
    flat: dict[str, Any] = {}
    for name, value in bound.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            flat.update(value)
        else:
            flat[name] = value
    return [flat[n] for n in names]


def prove(code: taskgen.TaskCode, module: nn.Module, captured: Captured, spec: ModelSpec) -> None:
    """The task stands alone: :class:`taskgen.NotStandalone` with what failed when it does not."""
    device = torch.device(spec.device)
    try:
        task = import_module_from_source(code.source, f"{code.name}.py")
        torch.manual_seed(spec.seed)
        init = task.get_init_inputs()
        with torch.device(device):
            alone = task.Model(*init).to(device)
    except Exception as error:
        raise taskgen.NotStandalone(f"its task does not build: {describe_error(error)}") from None
    result = alone.load_state_dict(module.state_dict(), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise taskgen.NotStandalone(
            f"built alone its parameters differ from the module's (missing {result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]})"
        )
    try:
        with torch.no_grad():
            got = alone(*bound_inputs(module, captured, code.input_names))
    except Exception as error:
        raise taskgen.NotStandalone(f"run alone on its inputs from the model it fails: {describe_error(error)}") from None
    comparison = compare_outputs(captured.output, got)
    if not comparison.passed:
        raise taskgen.NotStandalone(
            f"run alone it does not reproduce its output in the model ({comparison.message}): it depends on "
            "state its constructor and inputs do not give (attributes set later, data-dependent control flow)"
        )
    try:
        torch.manual_seed(spec.seed)
        with torch.device(device), torch.no_grad():
            alone(*task.get_inputs())
    except Exception as error:
        raise taskgen.NotStandalone(f"its task's random inputs do not run: {describe_error(error)}") from None


def in_place(captured: Captured) -> bool:
    outputs = list(_tensors(captured.output))
    inputs = list(_tensors([captured.args, captured.kwargs]))
    return any(o.data_ptr() == i.data_ptr() for o in outputs for i in inputs if o.numel() and i.numel())


def _tensors(value: Any) -> Any:
    from engine.eval.floor import tensors

    return tensors(value)


def write_group(spec: ModelSpec, loaded: Loaded, records: dict[str, ModuleRecord], group: Group, name: str, docstring: str) -> taskgen.TaskCode:
    model = loaded.model
    module = dict(model.named_modules())[group.representative]
    record = records[group.representative]
    call = constructor_call(model, group)
    local = loaded.user_module.__name__ if loaded.user_module is not None else None
    return taskgen.write_task(
        name, module, call, record.args, record.kwargs, spec.torch_dtype, docstring, local, loaded.user_source
    )


def extract(
    spec: ModelSpec, loaded: Loaded, records: dict[str, ModuleRecord], profile: dict[str, Any], top: int,
    progress: Any, leaves: bool = False, wanted: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Tasks and skipped groups as JSON-able dicts (sources included); nothing is written here."""
    model = loaded.model
    total_ms = {m["path"]: m["total_ms"] for m in profile["modules"]}
    progress("finding identical modules")
    found = grouping.identical(model, loaded.args, loaded.kwargs, records)
    if wanted:
        missing = [p for p in wanted if not any(p in g.paths for g in found)]
        if missing:
            raise LookupError(f"no module to extract at {', '.join(missing)} (a called, non-container module path)")
    tasks: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    used: set[str] = set()
    for _ in range(MAX_ROUNDS):
        chosen = [g for g in grouping.select(found, records, total_ms, top, leaves, wanted) if not g.skipped and g.representative not in {t["paths"][0] for t in tasks}]
        if not chosen:
            break
        progress(f"writing and proving {len(chosen)} task(s)")
        captured = capture(model, loaded, [g.representative for g in chosen])
        for group in chosen:
            outcome = write_and_prove(spec, loaded, records, group, captured, used, profile)
            (tasks if "source" in outcome else skipped).append(outcome)
        if wanted or len(tasks) >= top:
            break
    tasks.sort(key=lambda t: -t["total_ms"])
    return {"tasks": tasks[: top if not wanted else None], "skipped": skipped}


def write_and_prove(
    spec: ModelSpec, loaded: Loaded, records: dict[str, ModuleRecord], group: Group, captured: dict[str, Captured],
    used: set[str], profile: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The group's task written and proven (``source``, ``fingerprint``, paths, weights, …), or the group
    with the ``reason`` it cannot stand alone; a name is taken from ``used`` only for a task written."""
    device_ms = profile.get("device_ms") or 0.0
    entry = {
        "paths": group.paths, "type": group.type, "total_ms": group.total_ms,
        "share": group.total_ms / device_ms if device_ms else 0.0, "calls": sum(records[p].calls for p in group.paths),
    }  # fmt: skip
    seen = captured.get(group.representative)
    name = ""
    try:
        if seen is None:
            raise taskgen.NotStandalone("it was not called again in a second forward (data-dependent control flow)")
        if in_place(seen):
            raise taskgen.NotStandalone("it writes its output into its input (in place): a task must return a fresh output")
        name = task_name(group, used)
        code = write_group(spec, loaded, records, group, name, describe_group(spec, group, device_ms, profile.get("gpu")))
        prove(code, dict(loaded.model.named_modules())[group.representative], seen, spec)
    except taskgen.NotStandalone as why:
        group.skipped = str(why)
        used.discard(name)  # a skipped group leaves its name to the next task
        return {**entry, "reason": str(why)}
    record = records[group.representative]
    return {
        **entry, "name": name, "source": code.source, "fingerprint": code.fingerprint, "class": code.class_name,
        "init": code.init_expressions, "inputs": dict(zip(code.input_names, code.input_expressions, strict=True)),
        "constants": code.constants, "imports": code.imports, "inline_user_source": code.inline_user_source,
        "args": record.args, "kwargs": record.kwargs, "output": record.output,
        "weights": {p: {"prefix": f"{p}.", "tensors": len(dict(loaded.model.named_modules())[p].state_dict())} for p in group.paths},
    }  # fmt: skip
