"""A module of the user's model written as a KernelBench task file (ARCHITECTURE.md §9).

The task's ``Model`` *is* the module: a subclass of its class, built from the arguments the model built it
with (``engine.model.initargs``), cast to the model's dtype and put in eval mode, whose ``forward`` takes the
tensors of the module's first call positionally and passes everything else as the constants it was
called with. So the task's parameter names are the module's own (``conv1.weight``), and a ``ModelNew``
that keeps them takes the model's weights by name when it is applied back. ``get_inputs()`` draws fresh
tensors of the captured shapes and dtypes (integers within the range they took, booleans at their
fraction); ``get_init_inputs()`` rebuilds the constructor's arguments (``engine.model.literals``).

The body below the docstring is fingerprinted (``# cudaforge-task: <sha>``): ``apply`` matches a task
file, or a session's ``task.py``, to the module it came from by that, never by name.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from engine.model import literals, values
from engine.model.initargs import InitCall

FINGERPRINT = "# cudaforge-task: "
SOURCE_LINES = 150  # lines of the module's class source quoted for the Coder


class NotStandalone(Exception):
    """The module cannot be written as a task; the message is the reason extraction reports."""


@dataclass
class Parameter:
    """One parameter of a call being rewritten: how it is passed and what the task gives it."""

    name: str
    how: str  # "positional", "keyword", "star" (*args), "starstar" (**kwargs)
    expression: str  # the get_init_inputs / get_inputs expression, or the constant
    is_input: bool = True


@dataclass
class TaskCode:
    """Everything written for one task, and what ``apply`` needs to call a ``ModelNew`` in its place."""

    name: str
    source: str
    fingerprint: str
    class_name: str
    imports: list[str]
    init_expressions: list[str]
    input_names: list[str]
    input_expressions: list[str]
    constants: dict[str, str]
    inline_user_source: bool
    notes: list[str] = field(default_factory=list)


def strip_main_block(source: str) -> str:
    """The user's file without its ``if __name__ == "__main__":`` blocks (they would run in the task)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test):
            drop |= set(range(node.lineno - 1, (node.end_lineno or node.lineno)))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop) + "\n"


def tensor_expression(spec: dict[str, Any]) -> str:
    """Source drawing a fresh value shaped like ``spec`` (``engine.model.values``)."""
    kind = spec["t"]
    if kind == "tensor":
        shape = tuple(spec["shape"])
        dtype = f"torch.{spec['dtype']}"
        if spec["dtype"] == "bool":
            return f"torch.rand({shape}) < {spec.get('true', 0.5)!r}"
        if spec["dtype"].startswith(("int", "uint")):
            low, high = spec.get("low", 0), spec.get("high", 0)
            return f"torch.randint({low}, {high + 1}, {shape}, dtype={dtype})"
        return f"torch.randn({shape}, dtype={dtype})"
    if kind in ("tuple", "list"):
        inner = [tensor_expression(s) for s in spec["items"]]
        return f"({', '.join(inner)}{',' if len(inner) == 1 else ''})" if kind == "tuple" else f"[{', '.join(inner)}]"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {tensor_expression(v)}" for k, v in spec["items"].items()) + "}"
    if kind == "const":
        return spec["repr"]
    raise NotStandalone(f"a {spec['type']} value inside a forward argument")


def _signature(function: Any, what: str) -> inspect.Signature:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError) as error:
        raise NotStandalone(f"its {what} signature cannot be read ({error})") from None


def _bind(function: Any, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any], what: str) -> tuple[inspect.Signature, inspect.BoundArguments]:
    sig = _signature(function, what)
    try:
        return sig, sig.bind(None, *args, **kwargs)
    except TypeError as error:
        raise NotStandalone(f"its recorded {what} arguments do not fit its signature ({error})") from None


def _how(param: inspect.Parameter, index: int, positional_count: int) -> str:
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        return "star"
    if param.kind is inspect.Parameter.VAR_KEYWORD:
        return "starstar"
    if param.kind is inspect.Parameter.POSITIONAL_ONLY or (
        param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and index < positional_count
    ):
        return "positional"
    return "keyword"


def _call_text(params: list[Parameter]) -> str:
    parts = []
    for p in params:
        value = p.name if p.is_input else p.expression
        parts.append({"positional": value, "keyword": f"{p.name}={value}", "star": f"*{value}", "starstar": f"**{value}"}[p.how])
    return ", ".join(parts)


def init_parameters(cls: type, call: InitCall, local_module: str | None) -> tuple[list[Parameter], set[str]]:
    """Every constructor parameter in the class's own order, each with the source that rebuilds it: the
    value the model passed, else the parameter's default. So the task's ``Model`` takes the arguments the
    class does (``Bottleneck(inplanes, planes, stride, downsample, …)``), which is what a Coder who knows
    the class writes for ``ModelNew``. A default no source can rebuild is left out (the class uses it)."""
    sig, bound = _bind(cls.__init__, call.args, call.kwargs, "constructor")
    params, imports = [], set()
    for name, param in list(sig.parameters.items())[1:]:
        variadic = param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if name not in bound.arguments and (variadic or param.default is inspect.Parameter.empty):
            continue
        given = name in bound.arguments
        try:
            text, needed = literals.source(bound.arguments[name] if given else param.default, local_module)
        except literals.NotLiteral as why:
            if not given:
                continue
            raise NotStandalone(f"constructor argument `{name}` is {why}") from None
        how = {inspect.Parameter.VAR_POSITIONAL: "star", inspect.Parameter.VAR_KEYWORD: "starstar",
               inspect.Parameter.POSITIONAL_ONLY: "positional"}.get(param.kind, "keyword")  # fmt: skip
        params.append(Parameter(name, how, text))
        imports |= needed
    return params, imports


def forward_parameters(cls: type, args: list[dict[str, Any]], kwargs: dict[str, dict[str, Any]]) -> list[Parameter]:
    """The first call's arguments: tensors (alone or nested) become inputs, the rest constants."""
    sig, bound = _bind(cls.forward, args, kwargs, "forward")
    params = []
    for index, name in enumerate(list(sig.parameters)[1:]):
        if name not in bound.arguments:
            continue
        param, value = sig.parameters[name], bound.arguments[name]
        how = _how(param, index, len(args))
        if how == "starstar":
            for key, spec in value.items():
                params.append(_forward_parameter(key, "keyword", spec))
            continue
        if how == "star":
            spec = {"t": "tuple", "items": list(value)}
            params.append(_forward_parameter(name, "star", spec))
            continue
        params.append(_forward_parameter(name, how, value))
    return params


def _forward_parameter(name: str, how: str, spec: dict[str, Any]) -> Parameter:
    if values.has_tensor(spec):
        return Parameter(name, how, tensor_expression(spec))
    if spec["t"] == "object":
        raise NotStandalone(f"forward argument `{name}` is a {spec['type']} (only tensors and constants can be task inputs){_object_hint(spec['type'])}")
    return Parameter(name, how, tensor_expression(spec), is_input=False)


def _object_hint(type_name: str) -> str:
    """How to make such an argument go away, where that is known: a transformers model passes its KV cache
    to every decoder layer and attention unless it is called with ``use_cache=False``, and those layers are
    most of an LLM's time. (The cache cannot become a task input: the layer fills it as a side effect, which
    a kernel given only tensors would not do.)"""
    module, _, cls = type_name.rpartition(".")
    if module.split(".")[0] == "transformers" and cls.endswith("Cache"):
        return (
            "; it is the model's KV cache: call the model with use_cache=False to extract this module "
            '(an --inputs function can return {"input_ids": ..., "use_cache": False})'
        )
    return ""


def class_source_comment(cls: type) -> list[str]:
    """The class's own source as comment lines, for the Coder (it cannot import what it cannot read)."""
    try:
        lines = inspect.getsource(cls).splitlines()
        origin = inspect.getsourcefile(cls) or "?"
    except (OSError, TypeError):
        return []
    shown = lines[:SOURCE_LINES]
    cut = [f"# [... {len(lines) - SOURCE_LINES} more lines ...]"] if len(lines) > SOURCE_LINES else []
    return [f"# The source of {cls.__qualname__} ({origin}), for reference:", *("# " + line if line else "#" for line in shown), *cut]


def fingerprint(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def read_fingerprint(source: str) -> tuple[str | None, bool]:
    """(the fingerprint a task file states, whether its body still hashes to it)."""
    match = re.search(r"^" + re.escape(FINGERPRINT) + r"([0-9a-f]{16})\n", source, flags=re.M)
    if not match:
        return None, False
    return match.group(1), fingerprint(source[match.end() :]) == match.group(1)


def _model_class(class_name: str, init: list[Parameter], forward: list[Parameter], dtype: str) -> list[str]:
    init_names = ", ".join(["self", *(p.name for p in init)])
    inputs = ", ".join(["self", *(p.name for p in forward if p.is_input)])
    return [
        f"class Model({class_name}):",
        f"    def __init__({init_names}):",
        f"        super().__init__({_call_text(init)})",
        f"        self.to(torch.{dtype})",
        "        self.eval()",
        "",
        f"    def forward({inputs}):",
        f"        return super().forward({_call_text(forward)})",
    ]


def write_task(
    name: str, module: Any, call: InitCall, args: list[dict[str, Any]], kwargs: dict[str, dict[str, Any]],
    dtype: str, docstring: str, local_module: str | None, user_source: str | None,
) -> TaskCode:  # fmt: skip
    """The task for ``module`` (its class, constructor call and first forward call); :class:`NotStandalone`."""
    cls = type(module)
    try:
        class_name, class_imports = literals._importable(cls, local_module)
    except literals.NotLiteral as why:
        raise NotStandalone(f"its class {why}") from None
    init, init_imports = init_parameters(cls, call, local_module)
    forward = forward_parameters(cls, args, kwargs)
    needed = class_imports | init_imports
    inline = literals.LOCAL in needed
    if inline and user_source is None:
        raise NotStandalone("it needs names from a model file that is not at hand")
    imports = sorted({"import torch", "import torch.nn as nn", *needed} - {literals.LOCAL})
    body: list[str] = [*imports, ""]
    if inline and user_source is not None:
        body += ["# ---- the model's own file, inlined (its classes and helpers) ----", strip_main_block(user_source).rstrip(), "# ---- end of the model's file ----", ""]
    comment = [] if literals.LOCAL in class_imports else class_source_comment(cls)
    body += [*comment, *([""] if comment else []), *_model_class(class_name, init, forward, dtype.removeprefix("torch.")), ""]
    inputs = [p for p in forward if p.is_input]
    body += ["", "def get_inputs():", f"    return [{', '.join(p.expression for p in inputs)}]", ""]
    body += ["", "def get_init_inputs():", f"    return [{', '.join(p.expression for p in init)}]", ""]
    body_text = "\n".join(body)
    stamp = fingerprint(body_text)
    header = f'"""{textwrap.dedent(docstring).strip()}\n"""\n\n{FINGERPRINT}{stamp}\n'
    return TaskCode(
        name=name, source=header + body_text, fingerprint=stamp, class_name=class_name, imports=imports,
        init_expressions=[p.expression for p in init], input_names=[p.name for p in inputs],
        input_expressions=[p.expression for p in inputs],
        constants={p.name: p.expression for p in forward if not p.is_input}, inline_user_source=bool(inline),
    )  # fmt: skip
