"""Draining an SDK stream while honouring a cancel event.

Both SDKs return a ``Stream`` that is iterable and has ``close()``; closing it drops the HTTP
connection, which is how a cancelled call stops costing tokens on the server side.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from engine.llm.base import check_cancel


class ClosableStream(Protocol):
    def __iter__(self) -> Any: ...

    def close(self) -> None: ...


def drain(
    stream: ClosableStream, on_item: Callable[[Any], None], cancel: threading.Event | None, name: str
) -> None:
    """Feed every item to ``on_item``; check ``cancel`` between items; always close the stream."""
    try:
        items: Iterable[Any] = stream
        for item in items:
            check_cancel(cancel, name)
            on_item(item)
        check_cancel(cancel, name)
    finally:
        stream.close()
