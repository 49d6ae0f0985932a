"""The split transform's launchers: ``cf_launch_k``, its calls, and the template instances it needs.

Each kernel ``k`` gets a launcher ``cf_launch_k(grid, block, shared, stream, <k's own parameters>)``
defined next to it in the CUDA unit and declared in the C++ unit, so that the host code's arguments
convert exactly as they would at the ``<<<...>>>`` launch. A templated kernel gets a templated
launcher, explicitly instantiated in the CUDA unit for every set of template arguments the host code
launches it with: written out, or, inside an ``AT_DISPATCH_*`` lambda, the dispatched types
(ARCHITECTURE.md §3). Sits between ``rewrite`` (above) and ``parse`` (below).
"""

from __future__ import annotations

import re

from engine.eval.build.split.parse import TORCH_TEXT, Kernel, SplitSkipped, node_line, node_text

LAUNCH_PREFIX = "cf_launch_"
# The ablation switch (issue 25: own-kernel necessity): while it is on, every launcher returns without
# launching, so one forward shows whether the result needs the candidate's own kernels at all. The
# worker turns it on and off through the exported setter (engine.eval.ablation); the candidate's source
# may not name either (engine.guard.native, rule runtime-tampering).
ABLATE_SETTER = "cf_ablate_own_kernels"
ABLATE_STATE = (
    "static volatile int cf_ablated = 0;\n"
    f'extern "C" __attribute__((visibility("default"))) void {ABLATE_SETTER}(int on) {{ cf_ablated = on; }}\n'
)

# The types each AT_DISPATCH macro binds scalar_t to (ATen/Dispatch.h); half and bfloat16 dispatch
# is left to the stock build: c10::Half in a kernel is not certain to behave like __half.
DISPATCH_TYPES: dict[str, list[str]] = {
    "AT_DISPATCH_FLOATING_TYPES": ["float", "double"],
    "AT_DISPATCH_INTEGRAL_TYPES": ["uint8_t", "int8_t", "int16_t", "int32_t", "int64_t"],
    "AT_DISPATCH_ALL_TYPES": ["uint8_t", "int8_t", "int16_t", "int32_t", "int64_t", "float", "double"],
}


def launcher(kernel: Kernel, body: bool) -> str:
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
    launch = f"{kernel.name}{targs}<<<cf_grid, cf_block, cf_shared, cf_stream>>>({args});"
    return f"{signature} {{ if (cf_ablated) return; {launch} }}\n"


def launch_call(call, kernels: dict[str, Kernel], original: str) -> str:  # noqa: ANN001
    """The launcher call replacing the launch ``call`` (whose source text is ``original``).

    On one line, padded with the launch's own line breaks so that the host function keeps its line
    count; the launch's template arguments are recorded as instances of the kernel.
    """
    fn_node = call.child_by_field_name("function")
    config = next(c for c in call.children if c.type == "kernel_call_syntax")
    args = call.child_by_field_name("arguments")
    if fn_node.type == "identifier":
        name, targs = node_text(fn_node), ""
    elif fn_node.type == "template_function":
        name = node_text(fn_node.child_by_field_name("name"))
        targs = node_text(fn_node.child_by_field_name("arguments"))
    else:
        raise SplitSkipped(f"launch of {node_text(fn_node)!r} not understood (line {node_line(call)})")
    kernel = kernels.get(name)
    if kernel is None:
        raise SplitSkipped(
            f"launch of {name!r}, which is not a kernel of this source (line {node_line(call)})"
        )
    cfg = [node_text(c) for c in config.children if c.is_named]
    if not 2 <= len(cfg) <= 4:
        raise SplitSkipped(f"launch of {name} with {len(cfg)} configuration arguments")
    cfg += ["0"] * (4 - len(cfg))
    record_instances(kernel, targs, dispatch_macro(call), node_line(call))
    inner_args = node_text(args)[1:-1]
    replacement = (
        f"{LAUNCH_PREFIX}{name}{targs}({', '.join(cfg)}{', ' if inner_args.strip() else ''}{inner_args})"
    )
    return replacement.replace("\n", " ") + "\n" * original.count("\n")


def dispatch_macro(node) -> str | None:  # noqa: ANN001
    """The AT_DISPATCH_* macro whose lambda encloses ``node``, if any."""
    n = node.parent
    while n is not None:
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and node_text(fn).startswith("AT_DISPATCH"):
                return node_text(fn)
        n = n.parent
    return None


def record_instances(kernel: Kernel, targs: str, dispatch: str | None, line: int) -> None:
    """Add the template arguments a launch (``targs``, "" when deduced) needs to ``kernel.instantiations``."""
    if not kernel.template_names:
        if targs:
            raise SplitSkipped(f"non-template kernel {kernel.name} launched with template arguments")
        return
    if TORCH_TEXT.search(targs):
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


def instances(kernels: dict[str, Kernel]) -> list[str]:
    """The CUDA unit's explicit instantiations of the templated launchers, one line each.

    A template kernel that no launch gave known template arguments is refused: its launcher would
    be instantiated for nothing, and a call of it from the C++ unit would not link.
    """
    lines: list[str] = []
    for kernel in kernels.values():
        if kernel.template_params and not kernel.instantiations:
            raise SplitSkipped(
                f"template kernel {kernel.name} is never launched with known template arguments"
            )
        for i, targs in enumerate(sorted(kernel.instantiations)):
            lines.append(
                f"static void* const cf_instance_{kernel.name}_{i} __attribute__((used)) = "
                f"(void*)&{LAUNCH_PREFIX}{kernel.name}{targs};\n"
            )
    return lines
