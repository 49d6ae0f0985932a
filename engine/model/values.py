"""Plain, JSON-able descriptions of the values a module is called with and returns.

A module's first call is described (tensors by shape, dtype and, for integers and booleans, the range
their values took), so the profile can show it, extraction can group identical calls and write
``get_inputs()``, and the apply step can check a kernel is called as its task was. Only ``describe``
needs torch (the model process calls it); the rest reads the JSON and imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

# JSON form: {"t": "tensor", "shape", "dtype", ["low", "high"] | ["true"]}, {"t": "tuple"|"list", "items"},
# {"t": "dict", "items": {...}}, {"t": "const", "repr"}, {"t": "object", "type"}
SMALL_CONSTANT = 200  # characters: a longer repr is described as an object


def describe(value: Any) -> dict[str, Any]:
    import torch  # here, not at the top: short() and key() serve the TUI and the report, which load no torch

    if isinstance(value, torch.Tensor):
        spec: dict[str, Any] = {"t": "tensor", "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
        if value.numel() and not value.is_floating_point() and not value.is_complex() and not value.is_meta:
            if value.dtype == torch.bool:
                spec["true"] = round(float(value.float().mean()), 3)
            else:
                spec["low"], spec["high"] = int(value.min()), int(value.max())
        return spec
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return {"t": type(value).__name__, "items": [describe(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"t": "dict", "items": {k: describe(v) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        if len(text) <= SMALL_CONSTANT:
            return {"t": "const", "repr": text}
    if isinstance(value, (torch.dtype, torch.device)):
        return {"t": "const", "repr": f"torch.{value}" if isinstance(value, torch.dtype) else f"torch.device({str(value)!r})"}
    return {"t": "object", "type": f"{type(value).__module__}.{type(value).__qualname__}"}


def has_tensor(spec: dict[str, Any]) -> bool:
    if spec["t"] == "tensor":
        return True
    items = spec.get("items")
    if isinstance(items, dict):
        return any(has_tensor(v) for v in items.values())
    return any(has_tensor(v) for v in items or ())


def short(spec: dict[str, Any]) -> str:
    """``bfloat16[64×1024×14×14]``, ``(…, …)``, ``None``: how the tables show a value."""
    kind = spec["t"]
    if kind == "tensor":
        return f"{spec['dtype']}[{'×'.join(map(str, spec['shape'])) or 'scalar'}]"
    if kind in ("tuple", "list"):
        inner = ", ".join(short(s) for s in spec["items"])
        return f"({inner})" if kind == "tuple" else f"[{inner}]"
    if kind == "dict":
        return "{" + ", ".join(f"{k}: {short(v)}" for k, v in spec["items"].items()) + "}"
    if kind == "const":
        return spec["repr"]
    return spec["type"].rsplit(".", 1)[-1]


def key(spec: dict[str, Any]) -> str:
    """A grouping key: shapes, dtypes and constants, without the observed value ranges."""
    kind = spec["t"]
    if kind == "tensor":
        return f"T{spec['dtype']}{spec['shape']}"
    if kind in ("tuple", "list"):
        return kind + "(" + ",".join(key(s) for s in spec["items"]) + ")"
    if kind == "dict":
        return "{" + ",".join(f"{k}:{key(v)}" for k, v in sorted(spec["items"].items())) + "}"
    return spec.get("repr") or spec.get("type", "?")
