"""A Coder's kernel that repeats an earlier iteration is not built or timed again (ARCHITECTURE.md §2).

Why: a Coder sometimes returns the kernel it was given, or one it wrote before, with nothing but comments
or spacing changed. Evaluating it again costs a build and a timing, and worse, a second measurement of the
same kernel is a second draw of the timing noise: on CPU identical kernels measured up to 1.23× apart, and
the luckier draw would read as progress. So a reply is compared with the branch's earlier kernels after
:func:`normalise`; a repeat is pointed out to the Coder once, and a second repeat is committed as
"same as N" with iteration N's result, flagged so that it never competes for best (sessions.ranking).
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable

_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_SPACES = re.compile(r"[ \t\r\f\v]+")
_LITERAL = re.compile(r"(?P<prefix>[A-Za-z]*)(?P<quote>\"\"\"|'''|\"|')(?P<body>.*)(?P=quote)", re.DOTALL)


def _lines(text: str) -> str:
    """Each line's runs of spaces made one, ends stripped, blank lines dropped (newlines kept: a
    preprocessor line ends at one)."""
    return "\n".join(line for line in (_SPACES.sub(" ", raw).strip() for raw in text.splitlines()) if line)


def _string(token: str) -> str:
    """A string literal with the C/C++ comments in it removed and its whitespace normalised: the CUDA
    source of an inline extension lives in such literals. The quoting style is dropped too."""
    found = _LITERAL.fullmatch(token)
    if found is None:
        return _lines(_C_COMMENT.sub(" ", token))
    return f"{found['prefix'].lower()}<str>{_lines(_C_COMMENT.sub(' ', found['body']))}</str>"


def normalise(source: str) -> str:
    """``source`` with Python comments, C/C++ comments inside its strings and all layout whitespace taken
    out, keeping the tokens (and the indentation structure) that give it meaning. A source Python cannot
    tokenize is compared by its lines' normalised whitespace only."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _lines(source)
    kept: list[str] = []
    for token in tokens:
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER):
            continue
        if token.type == tokenize.STRING:
            kept.append(_string(token.string))
        elif token.type == tokenize.NEWLINE:
            kept.append("\n")
        elif token.type == tokenize.INDENT:
            kept.append("<indent>")
        elif token.type == tokenize.DEDENT:
            kept.append("<dedent>")
        else:
            kept.append(token.string)
    return " ".join(kept)


def same_as(source: str, earlier: Iterable[tuple[int, str]]) -> int | None:
    """The number of the first of ``earlier`` ((number, kernel source), oldest first) that
    :func:`normalise`\\ s to the same text as ``source``; None when the kernel is new."""
    key = normalise(source)
    return next((number for number, text in earlier if normalise(text) == key), None)
