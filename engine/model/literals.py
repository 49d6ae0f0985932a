"""Python source that rebuilds a value: how a captured constructor argument gets into a task file.

:func:`source` returns ``(expression, imports)`` or raises :class:`NotLiteral` with the reason, which
extraction reports for a module that cannot stand alone. What can be written:

* literals (None, bools, numbers, strings, bytes) and tuples, lists, dicts and sets of them;
* ``torch.dtype``, ``torch.device``, ``torch.Size``, small tensors (at most ``SMALL_TENSOR`` elements);
* classes, functions and enum members reachable by their module and qualified name (``nn.BatchNorm2d``),
  ``functools.partial`` of those;
* objects of such a class rebuilt from ``to_dict()`` (transformers' configs) or from their dataclass
  fields, kept only when the rebuilt object compares equal (its ``to_dict()``, or ``==``). State kept
  outside ``to_dict()`` in a private attribute (a config's ``_attn_implementation_internal``: which
  attention the model runs) is passed back through the constructor keyword of its public name where the
  class takes one; what still differs is left to extraction's proof, which runs the module alone.

Names defined in the user's model file are written bare and ask for that file to be inlined in the task:
their "import" is :data:`LOCAL`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import math
from typing import Any

import torch

SMALL_TENSOR = 64
LOCAL = "<the model's own file>"  # an import entry meaning: inline the user's file


class NotLiteral(Exception):
    """No source can rebuild this value; the message says what it is."""


def _importable(obj: Any, local_module: str | None) -> tuple[str, set[str]]:
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not module_name or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise NotLiteral(f"{obj!r} is defined inside a function (no file can name it)")
    if module_name == local_module:
        return qualname, {LOCAL}
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # noqa: BLE001 - any failure means it cannot be named
        raise NotLiteral(f"{module_name}.{qualname} cannot be imported by that name") from None
    if found is not obj:
        raise NotLiteral(f"{module_name}.{qualname} names another object")
    head = qualname.split(".")[0]
    return qualname, {f"from {module_name} import {head}"}


def _float(value: float) -> str:
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "float('-inf')"
    return repr(value)


def _sequence(items: Any, local_module: str | None) -> tuple[list[str], set[str]]:
    texts, imports = [], set()
    for item in items:
        text, needed = source(item, local_module)
        texts.append(text)
        imports |= needed
    return texts, imports


def _container(value: Any, local_module: str | None) -> tuple[str, set[str]] | None:
    if isinstance(value, torch.Size):
        return repr(tuple(value)), set()
    if type(value) in (list, tuple, set, frozenset):
        texts, imports = _sequence(value, local_module)
        if isinstance(value, list):
            return "[" + ", ".join(texts) + "]", imports
        if isinstance(value, tuple):
            return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")", imports
        body = "{" + ", ".join(sorted(texts)) + "}" if texts else "set()"
        return (body if isinstance(value, set) else f"frozenset({body})"), imports
    if type(value) is dict:
        keys, key_imports = _sequence(value.keys(), local_module)
        vals, val_imports = _sequence(value.values(), local_module)
        pairs = ", ".join(f"{k}: {v}" for k, v in zip(keys, vals, strict=True))
        return "{" + pairs + "}", key_imports | val_imports
    return None


def _torch_value(value: Any) -> tuple[str, set[str]] | None:
    if isinstance(value, torch.dtype):
        return f"torch.{str(value).removeprefix('torch.')}", {"import torch"}
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})", {"import torch"}
    if isinstance(value, torch.Tensor):
        if value.numel() > SMALL_TENSOR or value.is_meta:
            raise NotLiteral(f"a tensor of shape {tuple(value.shape)} (too large to write into a task file)")
        data = value.detach().cpu().tolist()
        dtype = str(value.dtype).removeprefix("torch.")
        return f"torch.tensor({data!r}, dtype=torch.{dtype})", {"import torch"}
    if isinstance(value, torch.nn.Module):
        raise NotLiteral(f"a module ({type(value).__name__}) built outside and passed in")
    return None


def _rebuilt(value: Any, local_module: str | None) -> tuple[str, set[str]] | None:
    """An object rebuilt by calling its class: from ``to_dict()`` or its dataclass fields."""
    cls = type(value)
    kwargs_options: list[dict[str, Any]] = []
    if callable(getattr(value, "to_diff_dict", None)):
        kwargs_options.append(value.to_diff_dict())
    if callable(getattr(value, "to_dict", None)):
        kwargs_options.append(value.to_dict())
    if dataclasses.is_dataclass(value):
        kwargs_options.append({f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init})
    if not kwargs_options:
        return None
    name, imports = _importable(cls, local_module)
    for kwargs in kwargs_options:
        try:
            copy = cls(**kwargs)
            same = copy.to_dict() == value.to_dict() if hasattr(value, "to_dict") else copy == value
        except Exception:  # noqa: BLE001 - this way does not rebuild it; try the next
            continue
        if same:
            kwargs = _private_state(cls, value, copy, kwargs)
            text, needed = source(kwargs, local_module)
            return f"{name}(**{text})", imports | needed
    raise NotLiteral(f"a {cls.__name__} that its own fields do not rebuild")


def _private_state(cls: type, value: Any, copy: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus ``name=...`` for each private attribute ``_name``/``_name_internal`` the rebuilt
    ``copy`` lacks and the constructor sets from that keyword."""
    own, rebuilt = getattr(value, "__dict__", {}), getattr(copy, "__dict__", {})
    for attribute, wanted in own.items():
        if not attribute.startswith("_") or wanted is None or rebuilt.get(attribute) == wanted:
            continue
        if not isinstance(wanted, (str, int, float, bool)):
            continue
        keyword = attribute.strip("_").removesuffix("_internal")
        try:
            trial = cls(**{**kwargs, keyword: wanted})
        except Exception:  # noqa: BLE001 - the class takes no such keyword
            continue
        if getattr(trial, "__dict__", {}).get(attribute) == wanted:
            kwargs = {**kwargs, keyword: wanted}
    return kwargs


def source(value: Any, local_module: str | None = None) -> tuple[str, set[str]]:
    """``(expression, import lines)`` that rebuild ``value`` in a task file; :class:`NotLiteral` otherwise."""
    if value is None or isinstance(value, (bool, str, bytes)) or (isinstance(value, int) and not isinstance(value, enum.Enum)):
        return repr(value), set()
    if isinstance(value, float):
        return _float(value), set()
    if isinstance(value, complex):
        return repr(value), set()
    for attempt in (_container(value, local_module), _torch_value(value)):
        if attempt is not None:
            return attempt
    if isinstance(value, enum.Enum):
        name, imports = _importable(type(value), local_module)
        return f"{name}.{value.name}", imports
    if isinstance(value, functools.partial):
        func, imports = source(value.func, local_module)
        args, arg_imports = _sequence(value.args, local_module)
        kwargs, kw_imports = _sequence(value.keywords.values(), local_module)
        parts = args + [f"{k}={v}" for k, v in zip(value.keywords, kwargs, strict=True)]
        return f"functools.partial({', '.join([func, *parts])})", imports | arg_imports | kw_imports | {"import functools"}
    if isinstance(value, type) or callable(value) and hasattr(value, "__qualname__"):
        return _importable(value, local_module)
    rebuilt = _rebuilt(value, local_module)
    if rebuilt is not None:
        return rebuilt
    raise NotLiteral(f"a {type(value).__module__}.{type(value).__qualname__} object")
