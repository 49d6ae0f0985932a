"""Syntax highlighting for the kernel and task panes, with every grammar optional.

Textual's TextArea ships no C, C++ or CUDA grammar. When ``tree_sitter_cuda`` is installed we
register it as ``cuda`` with the C++ highlight query (the CUDA grammar extends C++'s, so the query
applies; it parses ``<<<grid, block>>>`` where the C++ grammar reports an error). Without it —
or without ``tree_sitter_python`` for the Python side of a ``ModelNew`` file — the pane shows
plain text rather than failing.

Start-up cost: compiling a highlight query takes 30–50 ms on a small machine, and a stock
TextArea compiles it again for every document it loads (twice when the language and the text
change together). :func:`load_code` sets both in one document and :func:`share_prepared_queries`
compiles each (grammar, query) pair once per process, which is what Textual's own
``prepare_query`` docstring asks for ("prepared once, then reused").
"""

from __future__ import annotations

import importlib.util
from functools import cache
from typing import Any

from textual.widgets import TextArea

CUDA = "cuda"
PYTHON = "python"


@cache
def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


_PREPARED: dict[tuple[Any, str], Any] = {}


def share_prepared_queries() -> None:
    """Make every syntax-aware document reuse one compiled query per (grammar, query text).

    A ``tree_sitter.Query`` is immutable once compiled and each highlight pass runs it through its
    own ``QueryCursor``, so sharing it between TextAreas and documents is safe. Idempotent.
    """
    try:
        from textual.document._syntax_aware_document import SyntaxAwareDocument
    except ImportError:  # no tree-sitter: nothing is compiled, nothing to share
        return
    original = SyntaxAwareDocument.prepare_query
    if getattr(original, "_cudaforge_shared", False):
        return

    def prepare_query(self: Any, query: str) -> Any:
        key = (self.language, query)
        if key not in _PREPARED:
            _PREPARED[key] = original(self, query)
        return _PREPARED[key]

    prepare_query._cudaforge_shared = True  # type: ignore[attr-defined]
    SyntaxAwareDocument.prepare_query = prepare_query  # type: ignore[method-assign]


def load_code(area: TextArea, text: str, language: str | None) -> None:
    """Show ``text`` highlighted as ``language`` (None: plain), building the document once.

    Assigning ``area.language`` rebuilds the document from the old text before ``load_text``
    builds it again from the new one; setting the reactive without its watcher leaves one build.
    """
    share_prepared_queries()
    if area.language != language:
        area.set_reactive(TextArea.language, language)
    area.load_text(text)


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
