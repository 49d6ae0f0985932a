"""Split a stock-layout CUDA candidate into a torch-free CUDA unit and a C++ unit (issue 16).

A stock KernelBench candidate puts ``#include <torch/extension.h>`` and its ``torch::Tensor`` host
wrappers in ``cuda_sources``, so nvcc parses torch's headers: ~50 s a build. The fast format
(examples/kernels/relu_cuda.py) builds in seconds because nvcc sees only kernels and launchers and the
binding compiles against cudaforge's precompiled torch header. ``split_sources`` rewrites the first
shape into the second, just before the build, without the user or the agents seeing it:

- kernels, ``__device__`` functions and ``__constant__``/``__device__`` globals go to the CUDA unit;
- host functions go to the C++ unit, each ``k<<<g, b, s, st>>>(args)`` replaced by
  ``cf_launch_k(g, b, s, st, args)``, a launcher generated next to the kernel in the CUDA unit with
  the kernel's own parameter types (so arguments convert exactly as they would at the launch);
- templated kernels get templated launchers, instantiated in the CUDA unit for the launch's explicit
  template arguments, or, inside ``AT_DISPATCH_*`` lambdas, for the dispatched types;
- macros, type definitions and constants go to both units, in their original order;
- every copied piece is preceded by a ``#line`` directive naming the candidate's ``cuda_sources``
  string, so compiler messages point at the candidate's own lines. In the C++ unit each piece is
  named apart and numbered from 1 (``cuda_sources@TAG.K``, ``SplitSources.host_lines`` says where
  piece K starts): a kernel that grows or shrinks above the host code then leaves the C++ unit
  unchanged, so its object is reused (engine.eval.build.objects), where absolute numbers would make
  every such edit compile the binding again (7-11 s on the H200). ``absolute_lines`` turns those
  names back into the candidate's lines wherever a message is shown.

Whenever the rewrite is not certain to be right (torch types in device code, a kernel used other
than by a launch, half-precision dispatch, preprocessor conditionals, ...) it returns the reason
instead, and the caller builds the stock way: never a wrong build, only a slower one.

The transform has three parts, each importing only the ones below it: this module (the top-level
``split_sources``: which unit each top-level piece goes to, the host functions' launches rewritten,
the preludes), ``launchers`` (the ``cf_launch_*`` launchers, their calls and template instances) and
``parse`` (the tree-sitter parser, node helpers and kernel signatures).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from engine.eval.build.split.launchers import (
    ABLATE_SETTER,
    ABLATE_STATE,
    DISPATCH_TYPES,
    LAUNCH_PREFIX,
    instances,
    launch_call,
    launcher,
)
from engine.eval.build.split.lines import CUDA_FILE, absolute_lines, piece_tag
from engine.eval.build.split.parse import (
    TORCH_TEXT,
    Kernel,
    SplitSkipped,
    declared_names,
    function_name,
    has_errors,
    identifiers,
    node_line,
    node_text,
    parser,
    qualifiers,
    read_kernel,
)

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = [
    "ABLATE_SETTER",
    "CPP_FILE",
    "CPP_PRELUDE",
    "CUDA_FILE",
    "CUDA_PRELUDE",
    "DISPATCH_TYPES",
    "LAUNCH_PREFIX",
    "Kernel",
    "Piece",
    "SplitSkipped",
    "SplitSources",
    "absolute_lines",
    "host_flags",
    "piece_tag",
    "split_sources",
]

CPP_FILE = "cpp_sources"

_TORCH_INCLUDE = re.compile(r"^(torch/|ATen/|c10/|pybind11/)")
_CUDA_ONLY_INCLUDE = re.compile(
    r"^(cuda/|cub/|thrust/|cooperative_groups|mma\.h|cuda_pipeline|cuda_awbarrier|curand_kernel|sm_)"
)
_DEVICE_ONLY_HOST_USE = re.compile(r"\b(thrust|cub)::")
_DEVICE_VARIABLE = {"__constant__", "__device__", "__shared__", "__managed__"}
_TYPE_DEFINITIONS = ("struct_specifier", "class_specifier", "enum_specifier", "union_specifier")
_ALIASES = ("type_definition", "alias_declaration", "namespace_alias_definition")

CPP_PRELUDE = (
    "#include <torch/extension.h>\n"
    "#include <cuda_runtime.h>\n"
    "#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
)
# torch's headers bring these into the stock .cu; with them the device code sees the same overload
# sets (abs, min, max, std:: math) and macros (FLT_MAX, INT_MAX, assert) as in the stock build. A
# leaderboard softmax using FLT_MAX failed its split build before <cfloat> was here (it fell back to
# stock: slower, never wrong).
CUDA_PRELUDE = "".join(
    f"#include <{h}>\n"
    for h in (
        "cuda_runtime.h",
        "cuda_fp16.h",
        "cuda_bf16.h",
        "cmath",
        "cfloat",
        "climits",
        "cassert",
        "cstddef",
        "cstring",
        "cstdlib",
        "cstdint",
        "cstdio",
        "algorithm",
        "limits",
        "type_traits",
        "utility",
    )
)


@dataclass
class SplitSources:
    """The two units that replace the candidate's sources in the ``load_inline`` call."""

    cpp: str
    cuda: str
    kernels: list[str]
    # "TAG.K" -> the line of cuda_sources where the C++ unit's piece K starts (its #line names it apart)
    host_lines: dict[str, int] = field(default_factory=dict)




@dataclass(frozen=True)
class Piece:
    """One top-level piece of ``cuda_sources`` and the unit it is copied to.

    ``unit`` is "cuda", "cpp" or "both" for text copied as it is; "kernel" for a ``__global__``
    function (copied to the CUDA unit with its launcher, the launcher declared in the C++ unit);
    "host" for a host function, copied to the C++ unit with its launches rewritten (``node``).
    """

    unit: Literal["cuda", "cpp", "both", "kernel", "host"]
    text: str
    line: int  # of the piece in cuda_sources, for its #line directive
    kernel: Kernel | None = None  # unit "kernel"
    node: Node | None = None  # unit "host": the function_definition


@dataclass
class _Scan:
    """What the top-level pass over ``cuda_sources`` found."""

    pieces: list[Piece] = field(default_factory=list)
    kernels: dict[str, Kernel] = field(default_factory=dict)
    device_names: set[str] = field(default_factory=set)  # device functions and variables


def _line_directive(line: int, file: str) -> str:
    return f'#line {line} "{file}"\n'


def split_sources(cpp_text: str, cuda_text: str, tag: str = "ext") -> SplitSources:
    """Rewrite a stock-layout candidate into a torch-free CUDA unit and a C++ unit; raises ``SplitSkipped``.

    ``tag`` names this extension's pieces in the C++ unit's #line directives (``piece_tag``)."""
    tree = parser().parse(cuda_text.encode())
    root = tree.root_node
    if has_errors(root):
        raise SplitSkipped("cuda_sources did not parse cleanly")
    scan = _scan(root)
    if not scan.kernels:
        raise SplitSkipped("no __global__ kernel in cuda_sources")
    _check_cpp_sources_apart(cpp_text, root)
    host_lines: dict[str, int] = {}
    cpp_parts, cuda_parts = _units(scan, cpp_text, cuda_text, tag, host_lines)
    cuda_parts.append(_line_directive(1, "cudaforge_launchers"))
    cuda_parts += instances(scan.kernels)
    return SplitSources(
        cpp="".join(cpp_parts), cuda="".join(cuda_parts), kernels=sorted(scan.kernels), host_lines=host_lines
    )


def _scan(root) -> _Scan:  # noqa: ANN001
    """Each top-level piece of ``cuda_sources`` with its unit, in source order; raises ``SplitSkipped``."""
    scan = _Scan()
    for node in root.children:
        if node.type in ("comment", ";"):  # a struct's closing ";" is added back to the struct below
            continue
        piece = _preprocessor_piece(node)
        if piece is not None:
            scan.pieces.append(piece)
            continue
        template, inner = _unwrap_template(node)
        quals = qualifiers(inner)
        if inner.type == "function_definition":
            scan.pieces += _function_pieces(node, inner, template, quals, scan)
        elif inner.type == "declaration" and quals & _DEVICE_VARIABLE:
            scan.pieces.append(_device_variable_piece(node, inner, template, scan))
        else:
            scan.pieces.append(_host_declaration_piece(node, template))
    return scan


def _preprocessor_piece(node) -> Piece | None:  # noqa: ANN001
    """Includes (torch's to the C++ unit, CUDA-only ones to the CUDA unit), macros, ``#pragma``s."""
    kind, line = node.type, node_line(node)
    if kind == "preproc_include":
        path = node_text(node.child_by_field_name("path")).strip('<>"')
        if _TORCH_INCLUDE.match(path):
            return Piece("cpp", node_text(node), line)
        if _CUDA_ONLY_INCLUDE.match(path):
            return Piece("cuda", node_text(node), line)
        return Piece("both", node_text(node), line)
    if kind in ("preproc_def", "preproc_function_def"):
        return Piece("both", node_text(node), line)
    if kind == "preproc_call" and node_text(node).startswith("#pragma"):
        return Piece("cuda", node_text(node), line)
    return None


def _unwrap_template(node):  # noqa: ANN001, ANN202
    """(the template_declaration or None, the declaration it templates or ``node`` itself)."""
    if node.type != "template_declaration":
        return None, node
    inner = next((c for c in node.children if c.type in ("function_definition", "declaration")), None)
    if inner is None:
        raise SplitSkipped(f"line {node_line(node)}: template declaration not understood")
    return node, inner


def _function_pieces(node, inner, template, quals: set[str], scan: _Scan) -> list[Piece]:  # noqa: ANN001
    """A kernel, a device function, a ``__host__ __device__`` function (both units) or a host function."""
    line = node_line(node)
    name = function_name(inner)
    if name is None:
        raise SplitSkipped(f"line {line}: function not understood")
    if "__global__" in quals:
        if TORCH_TEXT.search(node_text(node)):
            raise SplitSkipped(f"kernel {name} uses torch in device code")
        if name in scan.kernels:
            raise SplitSkipped(f"kernel {name} is overloaded")
        scan.kernels[name] = read_kernel(inner, template)
        return [Piece("kernel", node_text(node), line, kernel=scan.kernels[name])]
    if "__device__" in quals and "__host__" not in quals:
        if TORCH_TEXT.search(node_text(node)):
            raise SplitSkipped(f"device function {name} uses torch")
        scan.device_names.add(name)
        return [Piece("cuda", node_text(node), line)]
    if "__device__" in quals:  # __host__ __device__: both units, internal linkage in the C++ one
        if TORCH_TEXT.search(node_text(node)):
            raise SplitSkipped(f"function {name} uses torch")
        text = node_text(node)
        linkage = template is not None or re.search(r"\b(static|inline|constexpr)\b", text.split("(")[0])
        return [Piece("cuda", text, line), Piece("cpp", text if linkage else "static inline " + text, line)]
    if template is not None:
        raise SplitSkipped(f"host function template {name} is not handled")
    return [Piece("host", node_text(inner), line, node=inner)]


def _device_variable_piece(node, inner, template, scan: _Scan) -> Piece:  # noqa: ANN001
    """A ``__constant__``/``__device__``/``__shared__``/``__managed__`` variable: CUDA unit only."""
    if template is not None:
        raise SplitSkipped(f"line {node_line(node)}: templated device variable")
    scan.device_names |= {node_text(c) for c in inner.children if c.is_named} & identifiers(inner)
    for d in inner.children_by_field_name("declarator"):
        scan.device_names |= declared_names(d)
    return Piece("cuda", node_text(node), node_line(node))


def _host_declaration_piece(node, template) -> Piece:  # noqa: ANN001
    """Types, aliases, function declarations and constants; anything else (a global variable) is refused."""
    kind, line, text = node.type, node_line(node), node_text(node)
    if template is not None:
        raise SplitSkipped(f"line {line}: template declaration not understood")
    if kind in _TYPE_DEFINITIONS:
        return Piece("cpp" if TORCH_TEXT.search(text) else "both", text + ";", line)
    if kind in _ALIASES:
        return Piece("cpp" if TORCH_TEXT.search(text) else "both", text, line)
    if kind == "using_declaration":
        torch = TORCH_TEXT.search(text) or re.search(r"\b(torch|at|c10)\b", text)
        return Piece("cpp" if torch else "both", text, line)
    if kind == "declaration":
        if "(" in text.split("=")[0] and "=" not in text:  # a function declaration
            return Piece("cpp", text, line)
        if re.search(r"\b(const|constexpr)\b", text) and not TORCH_TEXT.search(text):
            return Piece("both", text if re.search(r"\bstatic\b", text) else "static " + text, line)
        raise SplitSkipped(f"line {line}: global variable {text[:60]!r}")
    raise SplitSkipped(f"line {line}: top-level {kind} is not handled")


def _units(
    scan: _Scan, cpp_text: str, cuda_text: str, tag: str, host_lines: dict[str, int]
) -> tuple[list[str], list[str]]:
    """The C++ and CUDA units' parts: prelude, then every piece in source order after its #line (in
    the C++ unit, the piece's own name, numbered from 1; ``host_lines`` gets where each starts)."""
    cpp_parts: list[str] = [CPP_PRELUDE]
    if cpp_text.strip():
        cpp_parts += [_line_directive(1, CPP_FILE), cpp_text.rstrip() + "\n"]
    cuda_parts: list[str] = [CUDA_PRELUDE, ABLATE_STATE]

    def cpp_directive(piece: Piece) -> str:
        name = f"{tag}.{len(host_lines) + 1}"
        host_lines[name] = piece.line
        return _line_directive(1, f"{CUDA_FILE}@{name}")

    for piece in scan.pieces:
        directive = _line_directive(piece.line, CUDA_FILE)
        if piece.kernel is not None:
            cuda_parts += [directive, piece.text + "\n", launcher(piece.kernel, body=True)]
            cpp_parts += [cpp_directive(piece), launcher(piece.kernel, body=False)]
        elif piece.node is not None:
            cpp_parts += [
                cpp_directive(piece),
                _rewrite_host(piece.node, scan.kernels, scan.device_names, cuda_text) + "\n",
            ]
        else:
            if piece.unit in ("cuda", "both"):
                cuda_parts += [directive, piece.text + "\n"]
            if piece.unit in ("cpp", "both"):
                cpp_parts += [cpp_directive(piece), piece.text + "\n"]
    return cpp_parts, cuda_parts


def _check_cpp_sources_apart(cpp_text: str, cuda_root) -> None:  # noqa: ANN001
    """cpp_sources and the host code were two translation units; now they are one. That is only the
    same program when cpp_sources defines nothing (functions, macros, variables) that the host code
    also names, so that no overload set or macro changes meaning."""
    if not cpp_text.strip():
        return
    cpp_root = parser().parse(cpp_text.encode()).root_node
    defined: set[str] = set()
    for node in cpp_root.children:
        if node.type in ("preproc_def", "preproc_function_def"):
            defined.add(node_text(node.child_by_field_name("name")))
        elif node.type == "function_definition":
            defined.add(function_name(node) or "")
        elif node.type in ("preproc_include", "comment", "declaration", ";"):
            if node.type == "declaration" and "(" not in node_text(node):
                defined |= identifiers(node)
        elif node.type in ("using_declaration", "alias_declaration", "type_definition", "struct_specifier"):
            defined |= identifiers(node)
        else:
            raise SplitSkipped(f"cpp_sources has a top-level {node.type}, which is not handled")
    shared = (defined - {""}) & identifiers(cuda_root)
    if shared:
        raise SplitSkipped(f"cpp_sources defines {sorted(shared)[0]!r}, which cuda_sources also names")


def _rewrite_host(fn, kernels: dict[str, Kernel], device_names: set[str], source: str) -> str:  # noqa: ANN001
    """The host function's text with each kernel launch replaced by a launcher call (same line count)."""
    start = fn.start_byte
    data = source.encode()
    launches = _launches(fn)
    text = node_text(fn)
    if _DEVICE_ONLY_HOST_USE.search(text):
        raise SplitSkipped(f"host function {function_name(fn)} uses thrust/cub")
    _check_launched_only(fn, launches, kernels, device_names)
    edits: list[tuple[int, int, str]] = []
    for call in launches:
        original = data[call.start_byte : call.end_byte].decode()
        edits.append((call.start_byte - start, call.end_byte - start, launch_call(call, kernels, original)))
    out = text.encode()
    for s, e, r in sorted(edits, reverse=True):
        out = out[:s] + r.encode() + out[e:]
    return out.decode()


def _launches(fn) -> list:  # noqa: ANN001
    """The ``k<<<...>>>(...)`` call expressions in ``fn``."""
    launches: list = []
    stack = [fn]
    while stack:
        n = stack.pop()
        if n.type == "kernel_call_syntax":
            launches.append(n.parent)
            continue
        stack.extend(n.children)
    return launches


def _check_launched_only(fn, launches: list, kernels: dict[str, Kernel], device_names: set[str]) -> None:  # noqa: ANN001
    """A kernel or device symbol used by host code other than through a launch (cudaFuncSetAttribute,
    cudaMemcpyToSymbol, ...) would need the CUDA unit's symbol in the C++ unit: refused."""
    launch_spans = [(c.start_byte, c.end_byte) for c in launches]
    stack = [fn]
    while stack:
        n = stack.pop()
        if any(s <= n.start_byte and n.end_byte <= e for s, e in launch_spans):
            continue
        if n.type in ("identifier", "type_identifier") and (
            node_text(n) in kernels or node_text(n) in device_names
        ):
            raise SplitSkipped(
                f"host code uses {node_text(n)!r} other than by launching it (line {node_line(n)})"
            )
        stack.extend(n.children)


def host_flags(extra_cuda_cflags: list[str] | None) -> list[str]:
    """The part of the candidate's nvcc flags that applied to its host code, for the C++ unit.

    In the stock build the host wrappers were compiled by nvcc, so ``-D``/``-U`` macros and
    ``-Xcompiler`` options given for CUDA reached them; in the split build they live in the C++ unit.
    """
    flags: list[str] = []
    items = [str(f) for f in extra_cuda_cflags or []]
    i = 0
    while i < len(items):
        flag = items[i]
        if flag in ("-D", "-U") and i + 1 < len(items):
            flags += [flag, items[i + 1]]
            i += 1
        elif flag.startswith(("-D", "-U")):
            flags.append(flag)
        elif flag in ("-Xcompiler", "--compiler-options") and i + 1 < len(items):
            flags += [f for f in items[i + 1].split(",") if f]
            i += 1
        elif flag.startswith(("-Xcompiler=", "--compiler-options=")):
            flags += [f for f in flag.split("=", 1)[1].split(",") if f]
        i += 1
    return flags
