"""The static guard: read a candidate's source and refuse kernels that cheat, before anything runs.

Pure `ast` and string scanning: the candidate is never imported or executed. Entry points:
`check_source(source, backend, relax)` returns findings; `summarize(findings)` gives the verdict.
The rule ids and their meaning are in `engine.guard.rules`; the name lists in `engine.guard.vocab`;
the hot-path tensor heuristic in `engine.guard.hotpath`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from engine.guard.findings import Finding
from engine.guard.hotpath import HotPath, RawFinding
from engine.guard.native import defines_global_kernel, scan_native
from engine.guard.policy import GuardSettings
from engine.guard.pyindex import REGISTERED_OP, BuildCall, ModuleIndex
from engine.guard.rules import validate_relax
from engine.guard.wholefile import WholeFileScan

Backend = Literal["cuda", "cpu"]
_NATIVE_MARKERS = ("#include", "__global__", "<<<", "PYBIND11_MODULE", "TORCH_LIBRARY")


def check_source(
    source: str,
    backend: Backend = "cuda",
    relax: Iterable[str] = (),
    policy: str = "strict",
    refuse: Iterable[str] = (),
) -> list[Finding]:
    """All findings for one candidate source, sorted by line. Relaxed rules still appear, marked.

    ``policy`` and ``refuse`` set each finding's severity (``engine.guard.policy``); the default here is
    ``strict``, the rule table's own severities, while an evaluation passes its run's policy."""
    relaxed = validate_relax(relax)
    return check_source_under(source, backend, GuardSettings(policy, tuple(relaxed), tuple(refuse)))


def check_source_under(source: str, backend: Backend, settings: GuardSettings) -> list[Finding]:
    """`check_source` under a run's own guard settings, taken as they are: an evaluation hands its
    ``EvalOptions.guard`` here rather than splitting it into lists this module would put together again.
    Its runtime rule ids may be in ``settings.relax``; no static finding carries one."""
    if backend not in ("cuda", "cpu"):
        raise ValueError(f"unknown backend {backend!r}; expected 'cuda' or 'cpu'")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raw: list[RawFinding] = [
            ("syntax-error", exc.lineno or 1, f"the candidate does not parse: {exc.msg}")
        ]
    else:
        raw = _check_tree(tree, backend)
    return _finalize(raw, frozenset(settings.relax), settings)


def check_file(
    path: str | Path,
    backend: Backend = "cuda",
    relax: Iterable[str] = (),
    policy: str = "strict",
    refuse: Iterable[str] = (),
) -> list[Finding]:
    """`check_source` on a file's text."""
    return check_source(Path(path).read_text(encoding="utf-8"), backend, relax, policy, refuse)


def _finalize(raw: list[RawFinding], relaxed: frozenset[str], settings: GuardSettings) -> list[Finding]:
    """One finding per rule and line (the first message wins), in line order."""
    seen: dict[tuple[str, int], str] = {}
    for rule, line, message in raw:
        seen.setdefault((rule, line), message)
    return [
        Finding(rule, settings.severity(rule), line, message, rule in relaxed)  # type: ignore[arg-type]
        for (rule, line), message in sorted(seen.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    ]


def _check_tree(tree: ast.Module, backend: Backend) -> list[RawFinding]:
    idx = ModuleIndex(tree)
    raw: list[RawFinding] = []
    hot: HotPath | None = None
    info = idx.classes.get("ModelNew")
    if info is None:
        raw.append(("no-modelnew", 1, "no top-level `class ModelNew` in the candidate"))
    else:
        found = idx.method("ModelNew", "forward")
        if found is None:
            if "Model" not in info.base_names:
                raw.append(("no-modelnew", info.node.lineno, "`ModelNew` defines no `forward`"))
        else:
            roots = [found]
            call = idx.method("ModelNew", "__call__")
            if call is not None:
                roots.append(call)
            hot = HotPath(idx, roots)
            hot.run()
            raw.extend(hot.findings)
            if not hot.ext_builds:
                line = found[1].lineno
                if hot.unresolved:
                    names = ", ".join(sorted({w for _, w in hot.unresolved}))
                    raw.append(
                        (
                            "kernel-call-unresolved",
                            line,
                            f"no call of the compiled extension found; could not resolve: {names}",
                        )
                    )
                else:
                    raw.append(("kernel-not-called", line, "`forward` never calls the compiled extension"))
    hot_nodes = {id(fn.node) for fn in hot.fns.values()} if hot else set()
    raw.extend(WholeFileScan(idx, hot_nodes).run())
    raw.extend(_native_findings(idx, tree))
    if backend == "cuda":
        raw.extend(_cuda_build_findings(idx, hot))
    return raw


def _docstring_ids(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _native_constants(idx: ModuleIndex, tree: ast.Module) -> list[ast.Constant]:
    """String constants that are C++/CUDA source: those handed to a build call, and those that look like it."""
    found: dict[int, ast.Constant] = {}
    for build in idx.builds:
        sink: list[ast.Constant] = []
        for expr in (build.cpp, build.cuda):
            idx.resolve_text(expr, build.scope, sink)
        found.update((id(c), c) for c in sink)
    docstrings = _docstring_ids(tree)
    for node in ast.walk(tree):
        is_text = (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        )
        if is_text and any(marker in node.value for marker in _NATIVE_MARKERS):  # type: ignore[attr-defined]
            found.setdefault(id(node), node)  # type: ignore[arg-type]
    return sorted(found.values(), key=lambda c: (c.lineno, c.col_offset))


def _native_findings(idx: ModuleIndex, tree: ast.Module) -> list[RawFinding]:
    raw: list[RawFinding] = []
    for const in _native_constants(idx, tree):
        text: str = const.value
        for hit in scan_native(text):
            raw.append((hit.rule, const.lineno + text.count("\n", 0, hit.offset), hit.message))
    return raw


def _cuda_build_findings(idx: ModuleIndex, hot: HotPath | None) -> list[RawFinding]:
    """The CUDA backend needs a `__global__` kernel, built by an extension the hot path calls."""
    raw: list[RawFinding] = []
    has_kernel: dict[int, bool] = {}
    complete: dict[int, bool] = {}
    for build in idx.builds:
        text, ok = idx.resolve_text(build.cuda, build.scope) if build.kind == "load_inline" else ("", True)
        has_kernel[build.id] = defines_global_kernel(text)
        complete[build.id] = ok
        if not ok:
            raw.append(
                (
                    "kernel-source-unresolved",
                    build.node.lineno,
                    "the CUDA sources of this build could not be resolved statically; they were not fully checked",
                )
            )
    anywhere = any(has_kernel.values()) or any(
        defines_global_kernel(c.value) for c in _native_constants(idx, idx.tree)
    )
    line = (
        idx.builds[0].node.lineno
        if idx.builds
        else (idx.classes["ModelNew"].node.lineno if "ModelNew" in idx.classes else 1)
    )
    if not anywhere and all(complete.values()):
        raw.append(("no-global-kernel", line, "no `__global__` CUDA kernel is defined in the candidate"))
        return raw
    called = [b for b in idx.builds if hot and b.id in hot.ext_builds]
    relevant: list[BuildCall] = (
        called if called and not (hot and REGISTERED_OP in hot.ext_builds) else idx.builds
    )
    if not relevant:
        raw.append(
            ("kernel-not-built", line, "no `load_inline(..., cuda_sources=...)` builds the CUDA kernel")
        )
    elif not any(has_kernel[b.id] or not complete[b.id] for b in relevant):
        where = "the extension `forward` calls is" if called else "no extension is"
        raw.append(
            (
                "kernel-not-built",
                relevant[0].node.lineno,
                f"{where} not built from CUDA sources with a `__global__` kernel (cuda_sources)",
            )
        )
    return raw
