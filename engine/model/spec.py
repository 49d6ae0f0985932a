"""What names a user's model and its inputs, checked before anything is loaded (ARCHITECTURE.md §9).

A model is one of:

* a KernelBench-format file (``Model``, ``get_inputs``, ``get_init_inputs``);
* ``FILE.py:factory`` — a callable in that file returning the ``nn.Module``, with ``--inputs FILE.py:function``
  (an example batch: a tensor, a tuple/list of arguments, or a dict of keyword arguments) or ``--input-shape``;
* ``package.module:callable`` — an importable callable (``torchvision.models:resnet50``), same inputs.

Torch-free on purpose: the command line checks a spec (files, names, dtype, shapes) in a fraction of a
second, and only the child process (``engine.model.child``) imports the model.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# --dtype values and the torch dtype each stands for.
DTYPES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
INPUT_DTYPES = frozenset(
    {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}
)
INPUT_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64", "long": "int64"}


class ModelError(Exception):
    """The model, its inputs or a flag cannot be used; the message is one line that says what and where."""


@dataclass(frozen=True)
class InputShape:
    """One ``--input-shape`` tensor: its dimensions and dtype (integers are drawn from [0, 100))."""

    dims: tuple[int, ...]
    dtype: str = "float32"

    @classmethod
    def parse(cls, text: str) -> InputShape:
        shape, _, dtype = text.strip().partition(":")
        dtype = INPUT_DTYPE_ALIASES.get(dtype.strip(), dtype.strip()) or "float32"
        if dtype not in INPUT_DTYPES:
            raise ModelError(
                f"--input-shape {text!r}: unknown dtype {dtype!r} (one of {', '.join(sorted(INPUT_DTYPES))})"
            )
        parts = [p.strip() for p in shape.split(",") if p.strip()]
        if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ModelError(f"--input-shape {text!r}: expected positive sizes separated by commas, e.g. 64,3,224,224")
        return cls(tuple(int(p) for p in parts), dtype)


@dataclass(frozen=True)
class ModelSpec:
    """A model and its inputs as the user named them, plus the dtype, device and seed they run in.

    ``kind`` is ``kernelbench``, ``file`` (``FILE.py:factory``) or ``import`` (``package.module:callable``).
    """

    target: str
    kind: str
    file: str | None = None  # absolute path of the model's file (kernelbench, file)
    module: str | None = None  # dotted module (import)
    factory: str | None = None  # the callable's name (file, import)
    inputs_file: str | None = None
    inputs_function: str | None = None
    input_shapes: tuple[InputShape, ...] = ()
    dtype: str = "fp32"
    device: str = "cpu"
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def torch_dtype(self) -> str:
        return DTYPES[self.dtype]

    @property
    def label(self) -> str:
        return self.target

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["input_shapes"] = [{"dims": list(s.dims), "dtype": s.dtype} for s in self.input_shapes]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        data = dict(data)
        data["input_shapes"] = tuple(InputShape(tuple(s["dims"]), s["dtype"]) for s in data.get("input_shapes") or ())
        return cls(**data)


def parse_dtype(text: str | None) -> str:
    """``--dtype``: fp32, bf16 or fp16 (float32/bfloat16/float16 accepted too)."""
    value = (text or "fp32").strip().lower()
    aliases = {v: k for k, v in DTYPES.items()}
    value = aliases.get(value, value)
    if value not in DTYPES:
        raise ModelError(f"--dtype {text!r} is not one of {', '.join(DTYPES)}")
    return value


def _split_target(text: str) -> tuple[str, str | None]:
    """``a/b.py:make`` -> (``a/b.py``, ``make``); a Windows-free split on the last colon."""
    head, sep, tail = text.rpartition(":")
    if sep and tail and re.fullmatch(r"[A-Za-z_][\w.]*", tail) and head:
        return head, tail
    return text, None


SHOWN_NAMES = 12  # names an error lists


def _top_level_names(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as error:
        raise ModelError(f"{path} has a syntax error at line {error.lineno}: {error.msg}") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _names_to_show(path: Path) -> list[str]:
    """The file's public top-level names, its own functions and classes first: a factory file that imports
    a dozen transformers classes listed only those (sorted, capitals first) and never its own factories."""
    tree = ast.parse(path.read_text(), str(path))
    own = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    rest = _top_level_names(path) - own
    return [n for n in [*sorted(own), *sorted(rest)] if not n.startswith("_")]


def _require_name(path: Path, name: str, what: str) -> None:
    names = _top_level_names(path)
    if name not in names:
        shown = _names_to_show(path)
        more = f", … ({len(shown)})" if len(shown) > SHOWN_NAMES else ""
        raise ModelError(
            f"{path} defines no {what} `{name}` (it defines: {', '.join(shown[:SHOWN_NAMES]) or 'nothing at the top level'}{more})"
        )


def build_spec(
    target: str,
    *,
    inputs: str | None = None,
    input_shapes: list[str] | None = None,
    dtype: str | None = None,
    device: str = "cpu",
    seed: int = 0,
) -> ModelSpec:
    """Check what the user typed and turn it into a :class:`ModelSpec`; :class:`ModelError` says what is wrong."""
    dtype = parse_dtype(dtype)
    shapes = tuple(InputShape.parse(s) for s in input_shapes or ())
    path_text, factory = _split_target(target)
    inputs_file = inputs_function = None
    if inputs:
        file_text, function = _split_target(inputs)
        if function is None or not file_text.endswith(".py"):
            raise ModelError(f"--inputs {inputs!r} is not FILE.py:function")
        inputs_path = Path(file_text).expanduser()
        if not inputs_path.is_file():
            raise ModelError(f"--inputs: no such file: {inputs_path}")
        _require_name(inputs_path, function, "inputs function")
        inputs_file, inputs_function = str(inputs_path.resolve()), function
    common = dict(
        inputs_file=inputs_file, inputs_function=inputs_function, input_shapes=shapes, dtype=dtype,
        device=device, seed=seed,
    )  # fmt: skip
    if path_text.endswith(".py"):
        path = Path(path_text).expanduser()
        if not path.is_file():
            raise ModelError(f"no such model file: {path}")
        if factory is None:
            names = _top_level_names(path)
            missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
            if missing:
                raise ModelError(
                    f"{path} is not a KernelBench file (no {', '.join(missing)}): name a factory as {path}:FUNCTION"
                )
            if inputs or shapes:
                raise ModelError("a KernelBench file brings its own inputs (get_inputs): drop --inputs/--input-shape")
            return ModelSpec(target, "kernelbench", file=str(path.resolve()), **common)
        _require_name(path, factory, "factory")
        _require_inputs(inputs, shapes)
        return ModelSpec(target, "file", file=str(path.resolve()), factory=factory, **common)
    if factory is None or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*", path_text):
        raise ModelError(
            f"{target!r} names no model: use a KernelBench FILE.py, FILE.py:factory or package.module:callable"
        )
    _require_inputs(inputs, shapes)
    return ModelSpec(target, "import", module=path_text, factory=factory, **common)


def _require_inputs(inputs: str | None, shapes: tuple[InputShape, ...]) -> None:
    if not inputs and not shapes:
        raise ModelError("the model needs example inputs: --inputs FILE.py:function or --input-shape 64,3,224,224")
    if inputs and shapes:
        raise ModelError("give --inputs or --input-shape, not both")
