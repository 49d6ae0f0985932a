"""The split transform's view of a CUDA source: the tree-sitter parser, node helpers and kernel signatures.

The lowest of the split's three parts (``rewrite`` -> ``launchers`` -> ``parse``): it knows how to read a
top-level declaration (its name, its CUDA qualifiers, the names it declares) and a ``__global__``
kernel's parameters, and refuses (``SplitSkipped``) whatever it does not understand, so that the
caller builds the stock way (ARCHITECTURE.md §3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

# Text that names torch, ATen, c10 or pybind11: never allowed in the torch-free CUDA unit.
TORCH_TEXT = re.compile(r"\b(torch|at|c10|pybind11|py)::|\bAT_[A-Z_]+\b|\bTORCH_[A-Z_]+\b|\bC10_[A-Z_]+\b")


class SplitSkipped(Exception):
    """The transform is not certain to be right for this source; the reason is the message."""


@dataclass
class Kernel:
    name: str
    template_params: str  # "" or "template <typename T, int B>"
    template_names: list[str]
    params: list[str]  # declarations, each with a name
    param_names: list[str]
    instantiations: set[str] = field(default_factory=set)  # "<float, 4>" texts


@lru_cache(maxsize=1)
def parser():  # noqa: ANN201 - tree_sitter types are optional at import time
    import tree_sitter_cuda
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_cuda.language()))


def node_text(node) -> str:  # noqa: ANN001
    return node.text.decode()


def node_line(node) -> int:  # noqa: ANN001
    return node.start_point[0] + 1


def identifiers(node) -> set[str]:  # noqa: ANN001
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in ("identifier", "type_identifier"):
            found.add(node_text(n))
        stack.extend(n.children)
    return found


def has_errors(node) -> bool:  # noqa: ANN001
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            return True
        stack.extend(n.children)
    return False


def function_name(fn) -> str | None:  # noqa: ANN001
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None
    name = decl.child_by_field_name("declarator")
    return node_text(name) if name is not None else None


def read_kernel(fn, template) -> Kernel:  # noqa: ANN001
    """The signature of the ``__global__`` function ``fn`` (``template``: its template_declaration or None)."""
    decl = fn.child_by_field_name("declarator")
    if decl is None or decl.type != "function_declarator":
        raise SplitSkipped("kernel declarator not understood")
    name = node_text(decl.child_by_field_name("declarator"))
    params, names = _kernel_params(name, decl)
    tparams, tnames = _template_params(name, template)
    return Kernel(name, tparams, tnames, params, names)


def _kernel_params(name: str, decl) -> tuple[list[str], list[str]]:  # noqa: ANN001
    """The kernel's parameter declarations and their names; an unnamed parameter is given one."""
    params: list[str] = []
    names: list[str] = []
    for i, p in enumerate(c for c in decl.child_by_field_name("parameters").children if c.is_named):
        if p.type != "parameter_declaration":
            raise SplitSkipped(f"kernel {name}: parameter {node_text(p)!r} not understood")
        ptext = node_text(p)
        if TORCH_TEXT.search(ptext):
            raise SplitSkipped(f"kernel {name}: parameter {ptext!r} uses a torch type")
        ids = [n for n in _declarator_names(p)]
        if not ids:
            pname = f"cf_arg{i}"
            if ptext.strip() == "void":
                continue
            ptext = f"{ptext} {pname}"
        else:
            pname = ids[0]
        params.append(ptext)
        names.append(pname)
    return params, names


def _template_params(name: str, template) -> tuple[str, list[str]]:  # noqa: ANN001
    """("template <...>", the template parameters' names), or ("", []) for a kernel that is no template."""
    tparams, tnames = "", []
    if template is not None:
        plist = template.child_by_field_name("parameters")
        tparams = f"template {node_text(plist)}"
        for p in plist.children:
            if not p.is_named:
                continue
            ids = [node_text(c) for c in p.children if c.type in ("type_identifier", "identifier")]
            if p.type not in ("type_parameter_declaration", "parameter_declaration") or not ids:
                raise SplitSkipped(f"kernel {name}: template parameter {node_text(p)!r} not understood")
            tnames.append(ids[-1])
    return tparams, tnames


def _declarator_names(param) -> list[str]:  # noqa: ANN001
    decl = param.child_by_field_name("declarator")
    while decl is not None and decl.type != "identifier":
        decl = decl.child_by_field_name("declarator") or next(
            (c for c in decl.children if c.type == "identifier"), None
        )
    return [node_text(decl)] if decl is not None else []


def qualifiers(node) -> set[str]:  # noqa: ANN001
    """CUDA execution-space and memory qualifiers written on a top-level declaration."""
    found = set()
    for c in node.children:
        t = node_text(c) if c.child_count == 0 else ""
        if c.type in ("type_qualifier", "storage_class_specifier", "attribute_specifier"):
            t = node_text(c)
        for q in ("__global__", "__device__", "__host__", "__constant__", "__shared__", "__managed__"):
            if q in t:
                found.add(q)
    return found


def declared_names(decl) -> set[str]:  # noqa: ANN001
    names = set()
    while decl is not None:
        if decl.type == "identifier":
            names.add(node_text(decl))
            break
        decl = decl.child_by_field_name("declarator")
    return names
