"""Syntax highlighting for the kernel pane, with every grammar optional.

Textual's TextArea ships no C, C++ or CUDA grammar. When ``tree_sitter_cuda`` is installed we
register it as ``cuda`` with the C++ highlight query (the CUDA grammar extends C++'s, so the query
applies; it parses ``<<<grid, block>>>`` where the C++ grammar reports an error). Without it —
or without ``tree_sitter_python`` for the Python side of a ``ModelNew`` file — the pane shows
plain text rather than failing.
"""

from __future__ import annotations

import importlib.util

from textual.widgets import TextArea

CUDA = "cuda"
PYTHON = "python"


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def register_cuda(text_area: TextArea) -> bool:
    """Register the ``cuda`` language on this TextArea; False (and nothing done) when unavailable."""
    if not (
        _has_module("tree_sitter_cuda") and _has_module("tree_sitter") and _has_module("tree_sitter_cpp")
    ):
        return False
    try:
        import tree_sitter_cpp
        import tree_sitter_cuda
        from tree_sitter import Language

        text_area.register_language(
            CUDA, Language(tree_sitter_cuda.language()), tree_sitter_cpp.HIGHLIGHTS_QUERY
        )
    except Exception:  # a grammar/query version mismatch must not take the pane down
        return False
    return True


def language_for(view: str, text_area: TextArea) -> str | None:
    """The TextArea language for a pane view (``python`` or ``cuda``), or None for plain text."""
    if view == CUDA:
        return CUDA if register_cuda(text_area) else None
    return PYTHON if _has_module("tree_sitter_python") else None
