"""The arguments each module of a model was constructed with, recorded while the model is built.

Extraction writes a module as a task built from ``get_init_inputs()``, so it needs the arguments the
model's own code passed to each module's constructor. Nothing else records them: a module keeps what
its ``__init__`` derived, not what it was given. ``nn.Module.__new__`` sees the constructor's arguments
before ``__init__`` runs, so while :func:`recording` is active it keeps them, weakly keyed by the new
module (temporaries die, and a reused ``id`` could not mislabel a later module).

Only for the child process that loads the user's model (``engine.model.child``): the hook stays installed
once set (unsetting ``__new__`` on a class leaves CPython's slot wrappers refusing arguments), and it
does nothing outside ``recording``. A class with its own ``__new__`` is not seen; a module made by
``copy.deepcopy`` is recorded without arguments (``engine.model.extract`` borrows a twin's).
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch.nn as nn


@dataclass
class InitCall:
    """The positional and keyword arguments a module's constructor received."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


_RECORDS: weakref.WeakKeyDictionary[nn.Module, InitCall] = weakref.WeakKeyDictionary()
_ACTIVE = [False]
_INSTALLED = [False]


def _snapshot(value: Any) -> Any:
    """A shallow copy of containers, so a constructor that mutates a list it was given leaves ours intact."""
    if isinstance(value, (list, dict, set)):
        with contextlib.suppress(Exception):
            return copy.copy(value)
    return value


def _recording_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    module = object.__new__(cls)
    if _ACTIVE[0]:
        with contextlib.suppress(TypeError):  # an unhashable or non-weakref-able subclass: not recorded
            _RECORDS[module] = InitCall(tuple(_snapshot(a) for a in args), {k: _snapshot(v) for k, v in kwargs.items()})
    return module


def install() -> None:
    if not _INSTALLED[0]:
        nn.Module.__new__ = _recording_new  # type: ignore[method-assign]
        _INSTALLED[0] = True


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record constructor arguments of every module made inside the block."""
    install()
    _ACTIVE[0] = True
    try:
        yield
    finally:
        _ACTIVE[0] = False


def init_call(module: nn.Module) -> InitCall | None:
    """What ``module``'s constructor received, or None when it was not made under :func:`recording`."""
    return _RECORDS.get(module)
