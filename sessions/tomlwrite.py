"""A small TOML writer for ``session.toml``.

The standard library reads TOML (``tomllib``) but cannot write it, and the settings we store are
plain: strings, numbers, booleans, lists of those, and nested tables. Writing them here avoids a
dependency for a few dozen lines. ``None`` values are left out (TOML has no null).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps(data: Mapping[str, Any]) -> str:
    """Serialize a mapping to TOML text; raise ``TypeError`` for values TOML cannot hold."""
    lines: list[str] = []
    _write_table(data, (), lines)
    return "\n".join(lines).strip("\n") + "\n"


def _write_table(table: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    scalars = [(k, v) for k, v in table.items() if v is not None and not isinstance(v, Mapping)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(_key(part) for part in path) + "]")
    for key, value in scalars:
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables:
        _write_table(value, (*path, str(key)), lines)


def _key(key: object) -> str:
    text = str(key)
    return text if _BARE_KEY.match(text) else _string(text)


def _string(text: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes; TOML also forbids a raw DEL.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, _dt.datetime | _dt.date):
        return _string(value.isoformat())
    if isinstance(value, list | tuple):
        items = [_value(item) for item in value if item is not None]
        return "[" + ", ".join(items) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to session.toml")
