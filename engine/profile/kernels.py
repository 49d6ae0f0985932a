"""Find the `__global__` kernel names in a candidate's source, for ncu's `--kernel-name` filter.

Why: profiling every kernel in a forward call (cuBLAS, copies, PyTorch's own ops) costs ~2 s each under
`--set full` and buries the candidate's kernels in noise; ncu should look only at the kernels the Coder wrote.

The candidate is a Python file whose CUDA lives in string literals, so this is a small scanner over the
whole text rather than a C++ parser: comments are blanked out, then each `__global__` is followed past
qualifiers, attributes (`__launch_bounds__(...)`, `__attribute__((...))`, `[[...]]`) and the return type
to the identifier that precedes the parameter list (or a template argument list, for explicit
specialisations). ncu's default `--kernel-name-base function` reports exactly that bare name.
"""

from __future__ import annotations

import re

_QUALIFIERS = {
    "static",
    "inline",
    "extern",
    "__inline__",
    "__forceinline__",
    "__noinline__",
    "__device__",
    "__host__",
    "__global__",
    "constexpr",
    "const",
    "volatile",
    "unsigned",
    "signed",
    "template",
    "typename",
}
_PAREN_ATTRIBUTES = {
    "__launch_bounds__",
    "__cluster_dims__",
    "__maxnreg__",
    "__attribute__",
    "__declspec",
    "alignas",
    "__align__",
    "__grid_constant__",
}
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _blank_comments(text: str) -> str:
    """Replace // and /* */ comments (and Python '#' comment lines) with spaces, keeping offsets.

    A // comment ends at a real newline or at a literal backslash-n escape (one-line Python strings).

    String literals are not tracked: in a Python file the CUDA code *is* inside string literals, so
    tracking quotes would hide everything. A `#` line is dropped whole: in Python it is a comment and in
    CUDA a preprocessor directive, and neither declares a kernel.
    """
    out = list(text)

    def blank(start: int, end: int) -> None:
        for i in range(start, end):
            if out[i] != "\n":
                out[i] = " "

    for m in re.finditer(r"/\*.*?\*/|//(?:[^\n\\]|\\(?!n))*|^[ \t]*#[^\n]*", text, flags=re.S | re.M):
        blank(m.start(), m.end())
    return "".join(out)


def _skip_balanced(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index just past the bracket group starting at text[i] == open_ch (or len(text) if unbalanced)."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _skip_space(text: str, i: int) -> int:
    """Skip whitespace, and the escapes \\n \\t \\r that stand for it inside a one-line Python string."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "ntr":
            i += 2
        else:
            break
    return i


def _name_after_global(text: str, i: int) -> str | None:
    """Scan from just after `__global__` to the kernel's name; None if this is not a declaration."""
    last_ident: str | None = None
    for _ in range(64):  # a declaration head is short; give up on anything stranger
        i = _skip_space(text, i)
        if i >= len(text):
            return None
        c = text[i]
        if text.startswith("[[", i):
            i = _skip_balanced(text, i, "[", "]")
            continue
        if c == '"':  # extern "C"
            end = text.find('"', i + 1)
            i = end + 1 if end != -1 else len(text)
            continue
        if c == "(":
            return last_ident
        if c == "<":
            if last_ident is None:
                return None
            i = _skip_balanced(text, i, "<", ">")
            j = _skip_space(text, i)
            return last_ident if j < len(text) and text[j] == "(" else None
        if c in "*&":
            i += 1
            continue
        if text.startswith("::", i):
            i += 2
            continue
        m = _IDENT.match(text, i)
        if not m:
            return None
        word = m.group(0)
        i = m.end()
        if word in _PAREN_ATTRIBUTES:
            j = _skip_space(text, i)
            if j < len(text) and text[j] == "(":
                i = _skip_balanced(text, j, "(", ")")
            continue
        if word in _QUALIFIERS:
            continue
        last_ident = word
    return None


def kernel_names_from_source(source: str) -> list[str]:
    """Unique `__global__` function names in order of first appearance (prototypes and definitions merged)."""
    text = _blank_comments(source)
    names: list[str] = []
    for m in re.finditer(r"(?:(?<=\\[ntr])|(?<!\w))__global__(?!\w)", text):
        name = _name_after_global(text, m.end())
        if name and name not in names and name != "void":
            names.append(name)
    return names
