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
  string, so compiler messages point at the candidate's own lines.

Whenever the rewrite is not certain to be right (torch types in device code, a kernel used other
than by a launch, half-precision dispatch, preprocessor conditionals, ...) it returns the reason
instead, and the caller builds the stock way: never a wrong build, only a slower one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

CUDA_FILE = "cuda_sources"  # the name #line directives give the candidate's cuda_sources string
CPP_FILE = "cpp_sources"
LAUNCH_PREFIX = "cf_launch_"

_TORCH_INCLUDE = re.compile(r"^(torch/|ATen/|c10/|pybind11/)")
_CUDA_ONLY_INCLUDE = re.compile(
    r"^(cuda/|cub/|thrust/|cooperative_groups|mma\.h|cuda_pipeline|cuda_awbarrier|curand_kernel|sm_)"
)
_TORCH_TEXT = re.compile(r"\b(torch|at|c10|pybind11|py)::|\bAT_[A-Z_]+\b|\bTORCH_[A-Z_]+\b|\bC10_[A-Z_]+\b")
_DEVICE_ONLY_HOST_USE = re.compile(r"\b(thrust|cub)::")

# The types each AT_DISPATCH macro binds scalar_t to (ATen/Dispatch.h); half and bfloat16 dispatch
# is left to the stock build: c10::Half in a kernel is not certain to behave like __half.
DISPATCH_TYPES: dict[str, list[str]] = {
    "AT_DISPATCH_FLOATING_TYPES": ["float", "double"],
    "AT_DISPATCH_INTEGRAL_TYPES": ["uint8_t", "int8_t", "int16_t", "int32_t", "int64_t"],
    "AT_DISPATCH_ALL_TYPES": ["uint8_t", "int8_t", "int16_t", "int32_t", "int64_t", "float", "double"],
}

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


@dataclass
class SplitSources:
    """The two units that replace the candidate's sources in the ``load_inline`` call."""

    cpp: str
    cuda: str
    kernels: list[str]


@lru_cache(maxsize=1)
def _parser():  # noqa: ANN202 - tree_sitter types are optional at import time
    import tree_sitter_cuda
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_cuda.language()))


def _text(node) -> str:  # noqa: ANN001
    return node.text.decode()


def _line(node) -> int:  # noqa: ANN001
    return node.start_point[0] + 1


def _line_directive(line: int, file: str) -> str:
    return f'#line {line} "{file}"\n'


def _has_child(node, kind: str) -> bool:  # noqa: ANN001
    return any(c.type == kind for c in node.children)


def _identifiers(node) -> set[str]:  # noqa: ANN001
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in ("identifier", "type_identifier"):
            found.add(_text(n))
        stack.extend(n.children)
    return found


def _errors(node) -> bool:  # noqa: ANN001
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            return True
        stack.extend(n.children)
    return False


def _function_name(fn) -> str | None:  # noqa: ANN001
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None
    name = decl.child_by_field_name("declarator")
    return _text(name) if name is not None else None


def _kernel(fn, template) -> Kernel:  # noqa: ANN001
    decl = fn.child_by_field_name("declarator")
    if decl is None or decl.type != "function_declarator":
        raise SplitSkipped("kernel declarator not understood")
    name = _text(decl.child_by_field_name("declarator"))
    params: list[str] = []
    names: list[str] = []
    for i, p in enumerate(c for c in decl.child_by_field_name("parameters").children if c.is_named):
        if p.type != "parameter_declaration":
            raise SplitSkipped(f"kernel {name}: parameter {_text(p)!r} not understood")
        text = _text(p)
        if _TORCH_TEXT.search(text):
            raise SplitSkipped(f"kernel {name}: parameter {text!r} uses a torch type")
        ids = [n for n in _declarator_names(p)]
        if not ids:
            pname = f"cf_arg{i}"
            if text.strip() == "void":
                continue
            text = f"{text} {pname}"
        else:
            pname = ids[0]
        params.append(text)
        names.append(pname)
    tparams, tnames = "", []
    if template is not None:
        plist = template.child_by_field_name("parameters")
        tparams = f"template {_text(plist)}"
        for p in plist.children:
            if not p.is_named:
                continue
            ids = [_text(c) for c in p.children if c.type in ("type_identifier", "identifier")]
            if p.type not in ("type_parameter_declaration", "parameter_declaration") or not ids:
                raise SplitSkipped(f"kernel {name}: template parameter {_text(p)!r} not understood")
            tnames.append(ids[-1])
    return Kernel(name, tparams, tnames, params, names)


def _declarator_names(param) -> list[str]:  # noqa: ANN001
    decl = param.child_by_field_name("declarator")
    while decl is not None and decl.type != "identifier":
        decl = decl.child_by_field_name("declarator") or next(
            (c for c in decl.children if c.type == "identifier"), None
        )
    return [_text(decl)] if decl is not None else []


def _qualifiers(node) -> set[str]:  # noqa: ANN001
    """CUDA execution-space and memory qualifiers written on a top-level declaration."""
    found = set()
    for c in node.children:
        t = _text(c) if c.child_count == 0 else ""
        if c.type in ("type_qualifier", "storage_class_specifier", "attribute_specifier"):
            t = _text(c)
        for q in ("__global__", "__device__", "__host__", "__constant__", "__shared__", "__managed__"):
            if q in t:
                found.add(q)
    return found


def split_sources(cpp_text: str, cuda_text: str) -> SplitSources:
    """Rewrite a stock-layout candidate into a torch-free CUDA unit and a C++ unit; raises ``SplitSkipped``."""
    tree = _parser().parse(cuda_text.encode())
    root = tree.root_node
    if _errors(root):
        raise SplitSkipped("cuda_sources did not parse cleanly")
    kernels: dict[str, Kernel] = {}
    device_names: set[str] = set()
    # (unit, text, line) where unit is "cuda", "cpp" or "both"; "host" items get launches rewritten.
    pieces: list[tuple[str, object, int]] = []
    for node in root.children:
        kind = node.type
        line = _line(node)
        if kind in ("comment", ";"):  # a struct's closing ";" is added back to the struct below
            continue
        if kind == "preproc_include":
            path = _text(node.child_by_field_name("path")).strip('<>"')
            if _TORCH_INCLUDE.match(path):
                pieces.append(("cpp", _text(node), line))
            elif _CUDA_ONLY_INCLUDE.match(path):
                pieces.append(("cuda", _text(node), line))
            else:
                pieces.append(("both", _text(node), line))
            continue
        if kind in ("preproc_def", "preproc_function_def"):
            pieces.append(("both", _text(node), line))
            continue
        if kind == "preproc_call" and _text(node).startswith("#pragma"):
            pieces.append(("cuda", _text(node), line))
            continue
        template = None
        inner = node
        if kind == "template_declaration":
            template = node
            inner = next((c for c in node.children if c.type in ("function_definition", "declaration")), None)
            if inner is None:
                raise SplitSkipped(f"line {line}: template declaration not understood")
        quals = _qualifiers(inner)
        if inner.type == "function_definition":
            name = _function_name(inner)
            if name is None:
                raise SplitSkipped(f"line {line}: function not understood")
            if "__global__" in quals:
                if _TORCH_TEXT.search(_text(node)):
                    raise SplitSkipped(f"kernel {name} uses torch in device code")
                if name in kernels:
                    raise SplitSkipped(f"kernel {name} is overloaded")
                kernels[name] = _kernel(inner, template)
                pieces.append(("kernel", (_text(node), kernels[name]), line))
            elif "__device__" in quals and "__host__" not in quals:
                if _TORCH_TEXT.search(_text(node)):
                    raise SplitSkipped(f"device function {name} uses torch")
                device_names.add(name)
                pieces.append(("cuda", _text(node), line))
            elif "__device__" in quals:  # __host__ __device__: both units, internal linkage in the C++ one
                if _TORCH_TEXT.search(_text(node)):
                    raise SplitSkipped(f"function {name} uses torch")
                text = _text(node)
                linkage = template is not None or re.search(
                    r"\b(static|inline|constexpr)\b", text.split("(")[0]
                )
                pieces.append(("cuda", text, line))
                pieces.append(("cpp", text if linkage else "static inline " + text, line))
            else:
                if template is not None:
                    raise SplitSkipped(f"host function template {name} is not handled")
                pieces.append(("host", inner, line))
            continue
        if inner.type == "declaration" and quals & {
            "__constant__",
            "__device__",
            "__shared__",
            "__managed__",
        }:
            if template is not None:
                raise SplitSkipped(f"line {line}: templated device variable")
            device_names |= {_text(c) for c in inner.children if c.is_named} & _identifiers(inner)
            for d in inner.children_by_field_name("declarator"):
                device_names |= _declared_names(d)
            pieces.append(("cuda", _text(node), line))
            continue
        if template is not None:
            raise SplitSkipped(f"line {line}: template declaration not understood")
        if kind in ("struct_specifier", "class_specifier", "enum_specifier", "union_specifier"):
            pieces.append(("cpp" if _TORCH_TEXT.search(_text(node)) else "both", _text(node) + ";", line))
            continue
        if kind in ("type_definition", "alias_declaration", "namespace_alias_definition"):
            pieces.append(("cpp" if _TORCH_TEXT.search(_text(node)) else "both", _text(node), line))
            continue
        if kind == "using_declaration":
            pieces.append(
                (
                    "cpp"
                    if _TORCH_TEXT.search(_text(node)) or re.search(r"\b(torch|at|c10)\b", _text(node))
                    else "both",
                    _text(node),
                    line,
                )
            )
            continue
        if kind == "declaration":
            text = _text(node)
            if "(" in text.split("=")[0] and "=" not in text:  # a function declaration
                pieces.append(("cpp", text, line))
                continue
            if re.search(r"\b(const|constexpr)\b", text) and not _TORCH_TEXT.search(text):
                pieces.append(("both", text if re.search(r"\bstatic\b", text) else "static " + text, line))
                continue
            raise SplitSkipped(f"line {line}: global variable {text[:60]!r}")
        raise SplitSkipped(f"line {line}: top-level {kind} is not handled")
    if not kernels:
        raise SplitSkipped("no __global__ kernel in cuda_sources")
    _check_cpp_sources_apart(cpp_text, root)

    kernel_names = set(kernels)
    cpp_parts: list[str] = [CPP_PRELUDE]
    if cpp_text.strip():
        cpp_parts += [_line_directive(1, CPP_FILE), cpp_text.rstrip() + "\n"]
    cuda_parts: list[str] = [CUDA_PRELUDE]
    for unit, item, line in pieces:
        if unit == "kernel":
            text, kernel = item  # type: ignore[misc]
            cuda_parts += [_line_directive(line, CUDA_FILE), text + "\n", _launcher(kernel, body=True)]
            cpp_parts += [_line_directive(line, CUDA_FILE), _launcher(kernel, body=False)]
        elif unit == "host":
            cpp_parts += [
                _line_directive(line, CUDA_FILE),
                _rewrite_host(item, kernels, device_names, cuda_text) + "\n",
            ]
        else:
            text = str(item)
            if unit in ("cuda", "both"):
                cuda_parts += [_line_directive(line, CUDA_FILE), text + "\n"]
            if unit in ("cpp", "both"):
                cpp_parts += [_line_directive(line, CUDA_FILE), text + "\n"]
    cuda_parts.append(_line_directive(1, "cudaforge_launchers"))
    for kernel in kernels.values():
        if kernel.template_params and not kernel.instantiations:
            raise SplitSkipped(
                f"template kernel {kernel.name} is never launched with known template arguments"
            )
        for i, targs in enumerate(sorted(kernel.instantiations)):
            cuda_parts.append(
                f"static void* const cf_instance_{kernel.name}_{i} __attribute__((used)) = "
                f"(void*)&{LAUNCH_PREFIX}{kernel.name}{targs};\n"
            )
    return SplitSources(cpp="".join(cpp_parts), cuda="".join(cuda_parts), kernels=sorted(kernel_names))


def _check_cpp_sources_apart(cpp_text: str, cuda_root) -> None:  # noqa: ANN001
    """cpp_sources and the host code were two translation units; now they are one. That is only the
    same program when cpp_sources defines nothing (functions, macros, variables) that the host code
    also names, so that no overload set or macro changes meaning."""
    if not cpp_text.strip():
        return
    cpp_root = _parser().parse(cpp_text.encode()).root_node
    defined: set[str] = set()
    for node in cpp_root.children:
        if node.type in ("preproc_def", "preproc_function_def"):
            defined.add(_text(node.child_by_field_name("name")))
        elif node.type == "function_definition":
            defined.add(_function_name(node) or "")
        elif node.type in ("preproc_include", "comment", "declaration", ";"):
            if node.type == "declaration" and "(" not in _text(node):
                defined |= _identifiers(node)
        elif node.type in ("using_declaration", "alias_declaration", "type_definition", "struct_specifier"):
            defined |= _identifiers(node)
        else:
            raise SplitSkipped(f"cpp_sources has a top-level {node.type}, which is not handled")
    shared = (defined - {""}) & _identifiers(cuda_root)
    if shared:
        raise SplitSkipped(f"cpp_sources defines {sorted(shared)[0]!r}, which cuda_sources also names")


def _declared_names(decl) -> set[str]:  # noqa: ANN001
    names = set()
    while decl is not None:
        if decl.type == "identifier":
            names.add(_text(decl))
            break
        decl = decl.child_by_field_name("declarator")
    return names


def _launcher(kernel: Kernel, body: bool) -> str:
    """The launcher's definition (CUDA unit) or declaration (C++ unit), on one line after the kernel."""
    head = f"{kernel.template_params} " if kernel.template_params else ""
    params = ", ".join(
        ["dim3 cf_grid", "dim3 cf_block", "size_t cf_shared", "cudaStream_t cf_stream", *kernel.params]
    )
    signature = f"{head}void {LAUNCH_PREFIX}{kernel.name}({params})"
    if not body:
        return signature + ";\n"
    targs = f"<{', '.join(kernel.template_names)}>" if kernel.template_names else ""
    args = ", ".join(kernel.param_names)
    return f"{signature} {{ {kernel.name}{targs}<<<cf_grid, cf_block, cf_shared, cf_stream>>>({args}); }}\n"


def _dispatch_macro(node) -> str | None:  # noqa: ANN001
    """The AT_DISPATCH_* macro whose lambda encloses ``node``, if any."""
    n = node.parent
    while n is not None:
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and _text(fn).startswith("AT_DISPATCH"):
                return _text(fn)
        n = n.parent
    return None


def _rewrite_host(fn, kernels: dict[str, Kernel], device_names: set[str], source: str) -> str:  # noqa: ANN001
    """The host function's text with each kernel launch replaced by a launcher call (same line count)."""
    start = fn.start_byte
    data = source.encode()
    edits: list[tuple[int, int, str]] = []
    launches: list = []
    stack = [fn]
    while stack:
        n = stack.pop()
        if n.type == "kernel_call_syntax":
            launches.append(n.parent)
            continue
        stack.extend(n.children)
    launch_spans = [(c.start_byte, c.end_byte) for c in launches]
    text = _text(fn)
    if _DEVICE_ONLY_HOST_USE.search(text):
        raise SplitSkipped(f"host function {_function_name(fn)} uses thrust/cub")
    # A kernel or device symbol used by host code other than through a launch (cudaFuncSetAttribute,
    # cudaMemcpyToSymbol, ...) would need the CUDA unit's symbol in the C++ unit.
    stack = [fn]
    while stack:
        n = stack.pop()
        if any(s <= n.start_byte and n.end_byte <= e for s, e in launch_spans):
            continue
        if n.type in ("identifier", "type_identifier") and (_text(n) in kernels or _text(n) in device_names):
            raise SplitSkipped(f"host code uses {_text(n)!r} other than by launching it (line {_line(n)})")
        stack.extend(n.children)
    for call in launches:
        fn_node = call.child_by_field_name("function")
        config = next(c for c in call.children if c.type == "kernel_call_syntax")
        args = call.child_by_field_name("arguments")
        if fn_node.type == "identifier":
            name, targs = _text(fn_node), ""
        elif fn_node.type == "template_function":
            name = _text(fn_node.child_by_field_name("name"))
            targs = _text(fn_node.child_by_field_name("arguments"))
        else:
            raise SplitSkipped(f"launch of {_text(fn_node)!r} not understood (line {_line(call)})")
        kernel = kernels.get(name)
        if kernel is None:
            raise SplitSkipped(
                f"launch of {name!r}, which is not a kernel of this source (line {_line(call)})"
            )
        cfg = [_text(c) for c in config.children if c.is_named]
        if not 2 <= len(cfg) <= 4:
            raise SplitSkipped(f"launch of {name} with {len(cfg)} configuration arguments")
        cfg += ["0"] * (4 - len(cfg))
        _record_instances(kernel, targs, _dispatch_macro(call), _line(call))
        original = data[call.start_byte : call.end_byte].decode()
        inner_args = _text(args)[1:-1]
        replacement = (
            f"{LAUNCH_PREFIX}{name}{targs}({', '.join(cfg)}{', ' if inner_args.strip() else ''}{inner_args})"
        )
        replacement = replacement.replace("\n", " ") + "\n" * original.count("\n")
        edits.append((call.start_byte - start, call.end_byte - start, replacement))
    out = text.encode()
    for s, e, r in sorted(edits, reverse=True):
        out = out[:s] + r.encode() + out[e:]
    return out.decode()


def _record_instances(kernel: Kernel, targs: str, dispatch: str | None, line: int) -> None:
    if not kernel.template_names:
        if targs:
            raise SplitSkipped(f"non-template kernel {kernel.name} launched with template arguments")
        return
    if _TORCH_TEXT.search(targs):
        raise SplitSkipped(f"kernel {kernel.name} instantiated with a torch type (line {line})")
    uses_scalar = "scalar_t" in targs or not targs
    if not uses_scalar:
        kernel.instantiations.add(targs)
        return
    if dispatch is None:
        raise SplitSkipped(
            f"template kernel {kernel.name} launched with deduced or scalar_t arguments outside AT_DISPATCH (line {line})"
        )
    types = DISPATCH_TYPES.get(dispatch)
    if types is None:
        raise SplitSkipped(f"{dispatch} is not handled (half/bfloat16 or custom type lists)")
    if not targs:
        if len(kernel.template_names) != 1:
            raise SplitSkipped(f"template kernel {kernel.name} launched with deduced arguments (line {line})")
        targs = "<scalar_t>"
    for t in types:
        kernel.instantiations.add(re.sub(r"\bscalar_t\b", t, targs))


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
