"""Build a candidate's extensions while the reference is checked, before its import asks for them.

Why: the worker checks the task's reference before any candidate code runs (a broken task is never
blamed on the kernel; a compile error here in a call the import surely makes, ``StaticCall.certain``,
ends that check early), then imports the candidate, whose ``load_inline`` builds. The two do not depend on
each other, yet one waited for the other (ARCHITECTURE.md §3, "A round's own time").

How: the candidate's ``load_inline`` calls are read from its source without running it. A call is used
only when every argument is a literal, or a module-level name bound once to a literal (strings joined
with ``+`` or an f-string without fields included), and the sources include headers only in angle
brackets with no include folder of their own (the import could otherwise write what they include
first). Each such call is built in a thread, by the same build hook into the same build directory the
import will use, up to the point where torch would load the library. The import then takes the
directory's lock after the thread, finds nothing to build, and loads the library; the result records
the build as ``prebuilt`` with the thread's compile time. Nothing of the candidate runs in that thread:
its Python is not executed and its library is not loaded; only the compilers read its source, as in
the build stage. A build that fails there is not followed by the stock fallback: the import meets the same
failure at once in the build stage (the evaluation's ``BuildLedger`` remembers it,
engine.eval.build.failures), where its errors belong, and falls back as usual.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass, field
from typing import Any

from engine.eval.build.failures import BuildBudgetSpent
from engine.eval.build.objects import includes_local_header

LOAD_INLINE = "load_inline"
MAX_CALLS = 4  # a candidate with more extensions than this builds the rest at its import
POSITIONAL = ("name", "cpp_sources", "cuda_sources")
# Keywords that change where or how the import builds in ways a read of the source cannot follow
UNREADABLE_KEYWORDS = ("extra_include_paths", "build_directory", "sources")


class Unreadable(Exception):
    """A call whose arguments are not known without running the candidate."""


@dataclass
class StaticCall:
    """One ``load_inline`` call as the candidate's import will make it."""

    name: str
    cpp_sources: Any
    cuda_sources: Any
    kwargs: dict[str, Any] = field(default_factory=dict)
    # made by the import for sure: a statement of the module's own body calling torch's load_inline, which
    # nothing else in the source binds (not in a function, a branch or a try that may catch its failure)
    certain: bool = False


def read_calls(source: str) -> list[StaticCall]:
    """The candidate's ``load_inline`` calls whose arguments the source alone decides."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    constants = _module_constants(tree)
    certain = _certain_calls(tree)
    calls: list[StaticCall] = []
    for node in ast.walk(tree):
        if len(calls) >= MAX_CALLS:
            break
        if isinstance(node, ast.Call) and _called_name(node.func) == LOAD_INLINE:
            try:
                calls.append(_read_call(node, constants))
            except Unreadable:
                continue
            calls[-1].certain = id(node) in certain
    return calls


def _certain_calls(tree: ast.Module) -> set[int]:
    """The ``load_inline(...)`` calls the import makes for sure, by node id: the whole value of a statement
    of the module's body, where the name is torch's (``from torch.utils.cpp_extension import load_inline``)
    and nothing else binds it. Why: a compile error there fails the import, so the worker need not finish
    the reference check first (engine.eval.worker); a call in a function, a branch or a ``try`` may never
    run, or be caught."""
    torchs = bound = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if (alias.asname or alias.name) == LOAD_INLINE:
                    bound += 1
                    from_torch = isinstance(node, ast.ImportFrom) and node.module == "torch.utils.cpp_extension"
                    torchs += from_torch and alias.name == LOAD_INLINE
        else:
            bound += _binds(node, LOAD_INLINE)
    if bound != 1 or torchs != 1:
        return set()
    values = (s.value for s in tree.body if isinstance(s, (ast.Expr, ast.Assign, ast.AnnAssign)))
    return {
        id(v) for v in values if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == LOAD_INLINE
    }


def _binds(node: ast.AST, name: str) -> bool:
    """``node`` (not an import) binds ``name``: a definition, an assignment's target, a parameter."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, ast.Name):
        return node.id == name and not isinstance(node.ctx, ast.Load)
    return isinstance(node, ast.arg) and node.arg == name


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Names bound exactly once in the whole source, by a plain module-level assignment."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bound[name] = bound.get(name, 0) + 2
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound[node.name] = bound.get(node.name, 0) + 1
        elif isinstance(node, ast.arg):
            bound[node.arg] = bound.get(node.arg, 0) + 2
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    bound[name.id] = bound.get(name.id, 0) + 1
    constants: dict[str, ast.expr] = {}
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and bound.get(statement.targets[0].id) == 1
        ):
            constants[statement.targets[0].id] = statement.value
    return constants


def _value(node: ast.expr | None, constants: dict[str, ast.expr], depth: int = 0) -> Any:
    if node is None or depth > 20:
        raise Unreadable
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return _value(constants[node.id], constants, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(item, constants, depth + 1) for item in node.elts]
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return {_value(k, constants, depth + 1): _value(v, constants, depth + 1) for k, v in pairs}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, constants, depth + 1), _value(node.right, constants, depth + 1)
        if isinstance(left, str) and isinstance(right, str):
            return left + right
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values)  # type: ignore[union-attr]
    raise Unreadable


def _read_call(node: ast.Call, constants: dict[str, ast.expr]) -> StaticCall:
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise Unreadable
    values: dict[str, Any] = {}
    if len(node.args) > len(POSITIONAL):
        raise Unreadable
    for name, arg in zip(POSITIONAL, node.args, strict=False):
        values[name] = _value(arg, constants)
    for keyword in node.keywords:
        if keyword.arg in UNREADABLE_KEYWORDS:
            raise Unreadable
        values[keyword.arg] = _value(keyword.value, constants)
    name = values.pop("name", None)
    cpp, cuda = values.pop("cpp_sources", None), values.pop("cuda_sources", None)
    if not isinstance(name, str) or cpp is None:
        raise Unreadable
    for text in (*_texts(cpp), *_texts(cuda)):
        if includes_local_header(text):
            raise Unreadable  # may include a file the import writes first
    return StaticCall(name=name, cpp_sources=cpp, cuda_sources=cuda, kwargs=values)


def _texts(sources: Any) -> list[str]:
    if sources is None:
        return []
    if isinstance(sources, str):
        return [sources]
    if isinstance(sources, list) and all(isinstance(s, str) for s in sources):
        return sources
    raise Unreadable


class Prebuilt(BaseException):  # noqa: N818 - not an error: the signal that the build is done
    """Raised where torch would load a prebuilt library: the thread stops there, nothing is loaded."""


_IN_PREBUILD = threading.local()


def prebuilding() -> bool:
    """True in the prebuild thread (torch's library import must not run there)."""
    return bool(getattr(_IN_PREBUILD, "active", False))


class Prebuild:
    """The thread that builds ``calls`` with ``recorder`` (a BuildRecorder that never falls back to a
    stock build), recording each finished build by its directory."""

    def __init__(self, recorder: Any, calls: list[StaticCall], prepare: Any = None) -> None:
        self.recorder = recorder
        self.calls = calls
        self.prepare = prepare  # run first in the thread (e.g. the target architecture, which starts CUDA)
        self._thread = threading.Thread(target=self._run, name="cudaforge-prebuild", daemon=True)

    def start(self) -> Prebuild:
        self._thread.start()
        return self

    def wait(self) -> None:
        """Until every call is built (or has failed, for the import to build again and report)."""
        self._thread.join()

    def _run(self) -> None:
        _IN_PREBUILD.active = True
        try:
            if self.prepare is not None:
                self.prepare()
            for call in self.calls:
                try:
                    self.recorder._build(call.name, call.cpp_sources, call.cuda_sources, (), dict(call.kwargs))
                except Prebuilt:
                    continue
                except BuildBudgetSpent:  # the import meets the same refusal and reports it
                    return
                except Exception:  # noqa: BLE001 - the import builds it again and reports what failed
                    if call.certain and self.recorder.own_error_last:  # the import will fail on it: say so now
                        self.recorder.ledger.note_own_error()
                    continue
                finally:
                    forget_version(call.name)
        except Exception:  # noqa: BLE001 - a prebuild is only ever a head start
            return
        finally:
            _IN_PREBUILD.active = False


def forget_version(name: str) -> None:
    """torch skips the build of a name it already built in this process, and builds one whose flags
    changed under a new name (``name_v1``): let the next build of ``name`` (the import's, or the one
    without the precompiled header) build under ``name`` itself, and find nothing to do where the same
    build is done, rather than load what may not exist or compile everything again under another name."""
    try:
        import torch.utils.cpp_extension as cpp_extension

        cpp_extension.JIT_EXTENSION_VERSIONER.entries.pop(name, None)
    except Exception:  # noqa: BLE001 - torch's private bookkeeping; without it the build simply runs
        pass
