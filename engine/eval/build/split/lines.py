"""The candidate's own line numbers in messages about a split build's C++ unit (ARCHITECTURE.md §3).

The split build copies pieces of ``cuda_sources`` into the C++ unit under ``#line 1
"cuda_sources@TAG.K"``: each piece numbered from its own first line, so that the unit, and with it the
binding's compiled object, stays the same when a kernel above it grows or shrinks. Messages that quote
it (g++'s ``cuda_sources@ext.2:5:3: error``, c10's ``Exception raised from f at cuda_sources@ext.2:5``)
are shown with the candidate's line instead, from where each piece starts (``host_lines``). This module
imports nothing heavy: the evaluating process, which never loads torch or the parser, uses it too.
"""

from __future__ import annotations

import re

CUDA_FILE = "cuda_sources"  # the name #line directives give the candidate's cuda_sources string
# A piece of cuda_sources copied to the C++ unit, in a message: cuda_sources@TAG.K:LINE, LINE counted
# from the piece's first line (g++ also names the file alone: "cuda_sources@ext.2: In function ...")
_PIECE_LINE = re.compile(rf"\b{CUDA_FILE}@(\w+\.\d+)(?::(\d+))?")


def piece_tag(name: str) -> str:
    """The tag of an extension's pieces in the C++ unit's #line names: its name, as word characters."""
    return re.sub(r"\W", "_", name) or "ext"


def absolute_lines(text: str, host_lines: dict[str, int]) -> str:
    """``text`` with every ``cuda_sources@TAG.K:N`` of a known piece written as the candidate's own
    ``cuda_sources:LINE`` (and the file named alone as ``cuda_sources``); unknown pieces are left as
    they are."""
    if not host_lines or f"{CUDA_FILE}@" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        start = host_lines.get(match.group(1))
        if start is None:
            return match.group(0)
        if match.group(2) is None:
            return CUDA_FILE
        return f"{CUDA_FILE}:{start + int(match.group(2)) - 1}"

    return _PIECE_LINE.sub(replace, text)
