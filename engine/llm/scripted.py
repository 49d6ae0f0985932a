"""Scripted provider (``scripted/DIR``): replies read from files, for tests, demos and offline runs.

The replies are DIR's regular, non-hidden files in name order, one per call; once they run out,
the last one repeats. Replies are streamed line by line to the token callback so a front end
behaves as with a real model. Usage is zero and the cost 0.0: nothing was generated or billed.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from engine.llm.base import LLMReply, LLMRequest, Provider, TokenCallback, Usage, check_cancel
from engine.llm.errors import ConfigError

_THINK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


class ScriptedProvider(Provider):
    provider = "scripted"

    def __init__(self, directory: str, *, chunk_delay_s: float = 0.0) -> None:
        self.model = directory
        self.name = f"scripted/{directory}"
        self.directory = Path(directory).expanduser()
        self.chunk_delay_s = chunk_delay_s
        if not self.directory.is_dir():
            raise ConfigError(f"{self.name}: no such directory of scripted replies")
        self.files = sorted(p for p in self.directory.iterdir() if p.is_file() and not p.name.startswith("."))
        if not self.files:
            raise ConfigError(f"{self.name}: the directory holds no reply files")
        self._lock = threading.Lock()
        self.calls = 0

    def _next_file(self) -> Path:
        with self._lock:
            index = min(self.calls, len(self.files) - 1)
            self.calls += 1
        return self.files[index]

    def complete(
        self,
        request: LLMRequest,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LLMReply:
        check_cancel(cancel, self.name)
        started = time.monotonic()
        path = self._next_file()
        raw = path.read_text(encoding="utf-8")
        thinking = "\n".join(m.group(2).strip() for m in _THINK.finditer(raw))
        text = _THINK.sub("", raw).lstrip("\n")
        for line in text.splitlines(keepends=True):
            check_cancel(cancel, self.name)
            if on_token:
                on_token(line)
            if self.chunk_delay_s:
                time.sleep(self.chunk_delay_s)
        return LLMReply(
            text=text,
            thinking=thinking,
            model=self.name,
            usage=Usage(),
            latency_s=round(time.monotonic() - started, 4),
            cost_usd=0.0,
            provider=self.provider,
            raw_request_summary={
                "endpoint": "scripted",
                "file": path.name,
                "n_messages": len(request.messages),
            },
            stop_reason="end_turn",
            served_model=path.name,
        )


def branch_model(model: str, k: int) -> str:
    """The model for an exploration's branch ``k`` (1-based): ``scripted/DIR/branch-k`` when ``DIR`` has
    that folder, so each branch reads replies of its own (its Coder writes another kernel for another
    idea); ``scripted/DIR`` itself for the call that asks for the ideas (k = 0) and for a DIR without
    branch folders; any other model unchanged (a real model answers each branch's own prompt)."""
    provider, _, directory = model.partition("/")
    if provider != "scripted" or k < 1:
        return model
    folder = Path(directory).expanduser() / f"branch-{k}"
    return f"scripted/{folder}" if folder.is_dir() else model
