"""An index of one candidate module: what its names mean, without importing or running it.

The checks need to know that `F.relu` is `torch.nn.functional.relu`, that `self.op` is the compiled
extension, that `self.fc` is an `nn.Linear`, and which string is handed to `load_inline` as CUDA
source. All of that is read from the AST: imports give aliases, assignments give values, and a
small fixpoint follows values through names, `self` attributes and functions that return them.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from dataclasses import dataclass, field

from engine.guard.vocab import ATEN_OP_NAMESPACES

BUILD_FUNCTIONS = {
    "torch.utils.cpp_extension.load_inline": "load_inline",
    "torch.utils.cpp_extension.load": "load",
}
REGISTERED_OP = -1  # build id standing for a `torch.ops.<ns>.<fn>` op the candidate registered itself
_BUILTIN_NAMES = frozenset(dir(builtins))

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class BuildCall:
    """One `load_inline(...)`/`load(...)` call and the source expressions handed to it."""

    id: int
    node: ast.Call
    kind: str
    cpp: ast.expr | None
    cuda: ast.expr | None
    files: ast.expr | None
    scope: Function | None


@dataclass
class ClassInfo:
    """A class defined at module level: its methods, bases and the values assigned to `self.<attr>`."""

    node: ast.ClassDef
    methods: dict[str, Function] = field(default_factory=dict)
    attrs: dict[str, list[tuple[ast.expr, Function]]] = field(default_factory=dict)
    base_names: list[str] = field(default_factory=list)
    base_qualnames: list[str] = field(default_factory=list)


def assign_pairs(stmt: ast.AST) -> Iterator[tuple[ast.expr, ast.expr]]:
    """(target, value) pairs of an assignment statement, unpacking literal tuples pairwise."""
    if isinstance(stmt, ast.Assign):
        targets, value = stmt.targets, stmt.value
    elif (
        isinstance(stmt, (ast.AnnAssign, ast.AugAssign))
        and stmt.value is not None
        or isinstance(stmt, ast.NamedExpr)
    ):
        targets, value = [stmt.target], stmt.value
    else:
        return
    for target in targets:
        pairwise = isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
        if pairwise and len(target.elts) == len(value.elts):  # type: ignore[union-attr]
            yield from zip(target.elts, value.elts, strict=True)  # type: ignore[union-attr]
        else:
            yield target, value


def walk_function(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function body (nested lambdas and defs included: they run on its behalf)."""
    body = fn.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else [fn.body]
    for stmt in body:
        yield from ast.walk(stmt)


class ModuleIndex:
    """Names, classes, functions and build calls of one candidate module."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases: dict[str, str] = {}
        self.functions: dict[str, Function] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.module_values: dict[str, list[ast.expr]] = {}
        self.parents: dict[int, ast.AST] = {}
        self.builds: list[BuildCall] = []
        self.ext_names: dict[str, set[int]] = {}
        self.ext_factories: dict[str, set[int]] = {}
        self.ext_attrs: dict[str, dict[str, set[int]]] = {}
        self.ext_methods: dict[str, dict[str, set[int]]] = {}
        self._local_cache: dict[int, dict[str, list[ast.expr]]] = {}
        self._index()

    # ----------------------------------------------------------------- building the index
    def _index(self) -> None:
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{base}.{a.name}" if base else a.name
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[stmt.name] = stmt
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = self._class_info(stmt)
        for stmt in self.tree.body:
            for target, value in self._module_assignments(stmt):
                if isinstance(target, ast.Name):
                    self.module_values.setdefault(target.id, []).append(value)
        # simple aliases of module-level names: `mm = torch.matmul`, `F = torch.nn.functional`
        for name, values in self.module_values.items():
            if len(values) == 1 and name not in self.aliases:
                q = self.qualname(values[0])
                if q:
                    self.aliases[name] = q
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                kind = BUILD_FUNCTIONS.get(self.qualname(node.func) or "")
                if kind:
                    self.builds.append(self._build_call(node, kind))
        self._resolve_extensions()

    def _module_assignments(self, stmt: ast.stmt) -> Iterator[tuple[ast.expr, ast.expr]]:
        """Assignments that bind module-level names: top-level ones and `global` ones inside functions."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            declared = {n for g in ast.walk(stmt) if isinstance(g, ast.Global) for n in g.names}
            for node in ast.walk(stmt):
                for target, value in assign_pairs(node):
                    if isinstance(target, ast.Name) and target.id in declared:
                        yield target, value
            return
        if isinstance(stmt, ast.ClassDef):
            return
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Lambda,)):
                continue
            yield from assign_pairs(node)

    def _class_info(self, node: ast.ClassDef) -> ClassInfo:
        info = ClassInfo(node)
        for base in node.bases:
            if isinstance(base, ast.Name):
                info.base_names.append(base.id)
            q = self.qualname(base)
            if q:
                info.base_qualnames.append(q)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.methods[stmt.name] = stmt
            elif (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Name)
                and stmt.value.id in self.functions
            ):
                for target in stmt.targets:  # `forward = _impl`: a module function used as a method
                    if isinstance(target, ast.Name):
                        info.methods[target.id] = self.functions[stmt.value.id]
        for method in info.methods.values():
            for sub in ast.walk(method):
                for target, value in assign_pairs(sub):
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and (target.value.id == "self")
                    ):
                        info.attrs.setdefault(target.attr, []).append((value, method))
                if (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Attribute)
                    and sub.func.attr
                    in (
                        "register_buffer",
                        "register_parameter",
                        "register_module",
                        "add_module",
                    )
                    and len(sub.args) >= 2
                    and isinstance(sub.args[0], ast.Constant)
                    and isinstance(sub.args[0].value, str)
                ):
                    info.attrs.setdefault(sub.args[0].value, []).append((sub.args[1], method))
                if (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Name)
                    and sub.func.id == "setattr"
                    and (
                        len(sub.args) == 3
                        and isinstance(sub.args[0], ast.Name)
                        and sub.args[0].id == "self"
                        and isinstance(sub.args[1], ast.Constant)
                        and isinstance(sub.args[1].value, str)
                    )
                ):
                    info.attrs.setdefault(sub.args[1].value, []).append((sub.args[2], method))
        return info

    def _build_call(self, node: ast.Call, kind: str) -> BuildCall:
        def arg(name: str, pos: int) -> ast.expr | None:
            for kw in node.keywords:
                if kw.arg == name:
                    return kw.value
            return node.args[pos] if len(node.args) > pos else None

        scope = self.enclosing_function(node)
        if kind == "load":
            return BuildCall(len(self.builds), node, kind, None, None, arg("sources", 1), scope)
        return BuildCall(
            len(self.builds), node, kind, arg("cpp_sources", 1), arg("cuda_sources", 2), None, scope
        )

    # ----------------------------------------------------------------- queries
    def enclosing_function(self, node: ast.AST) -> Function | None:
        cur = self.parents.get(id(node))
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cur = self.parents.get(id(cur))
        return cur  # type: ignore[return-value]

    def enclosing_class(self, node: ast.AST) -> str | None:
        cur = self.parents.get(id(node))
        while cur is not None and not isinstance(cur, ast.ClassDef):
            cur = self.parents.get(id(cur))
        return cur.name if isinstance(cur, ast.ClassDef) and cur.name in self.classes else None

    def qualname(self, expr: ast.AST | None) -> str | None:
        """The dotted name an expression refers to through the module's imports (`F.relu` ->
        `torch.nn.functional.relu`), `builtins.X` for an unshadowed builtin, else None."""
        if isinstance(expr, ast.Name):
            if expr.id in self.aliases:
                return self.aliases[expr.id]
            if (
                expr.id in _BUILTIN_NAMES
                and expr.id not in self.module_values
                and expr.id not in self.functions
            ):
                return f"builtins.{expr.id}"
            return None
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Call) and self.is_builtin(expr.func, "getattr") and len(expr.args) >= 2:
            name = expr.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                base = self.qualname(expr.args[0])
                return f"{base}.{name.value}" if base else None
        return None

    def is_builtin(self, expr: ast.AST, name: str) -> bool:
        return self.qualname(expr) == f"builtins.{name}" if isinstance(expr, ast.Name) else False

    def local_values(self, fn: ast.AST | None) -> dict[str, list[ast.expr]]:
        """Values assigned to plain names inside a function (flow-insensitive)."""
        if fn is None:
            return {}
        key = id(fn)
        if key not in self._local_cache:
            values: dict[str, list[ast.expr]] = {}
            for node in walk_function(fn):
                for target, value in assign_pairs(node):
                    if isinstance(target, ast.Name):
                        values.setdefault(target.id, []).append(value)
            self._local_cache[key] = values
        return self._local_cache[key]

    def class_attrs(self, cls: str | None) -> dict[str, list[tuple[ast.expr, Function]]]:
        """`self.<attr>` values of a class, including those of its in-file bases."""
        merged: dict[str, list[tuple[ast.expr, Function]]] = {}
        for info in self.mro(cls):
            for name, values in info.attrs.items():
                merged.setdefault(name, []).extend(values)
        return merged

    def mro(self, cls: str | None) -> list[ClassInfo]:
        """The class and its in-file bases, depth-first (enough for candidate files)."""
        out: list[ClassInfo] = []
        todo = [cls] if cls else []
        while todo:
            name = todo.pop(0)
            info = self.classes.get(name or "")
            if info is None or info in out:
                continue
            out.append(info)
            todo.extend(info.base_names)
        return out

    def method(self, cls: str | None, name: str) -> tuple[str, Function] | None:
        for info in self.mro(cls):
            if name in info.methods:
                return info.node.name, info.methods[name]
        return None

    # ----------------------------------------------------------------- extensions
    def ext_of(
        self, expr: ast.AST | None, cls: str | None = None, local: dict[str, set[int]] | None = None
    ) -> set[int]:
        """Build ids an expression's value comes from (the extension module or one of its functions);
        empty when the expression is not (known to be) the compiled extension."""
        if isinstance(expr, ast.Call):
            kind = BUILD_FUNCTIONS.get(self.qualname(expr.func) or "")
            if kind:
                return {b.id for b in self.builds if b.node is expr}
            if isinstance(expr.func, ast.Name) and expr.func.id in self.ext_factories:
                return set(self.ext_factories[expr.func.id])
            if self.is_ext_method(expr.func, cls):
                return self.ext_method_builds(expr.func, cls)
            if self.is_builtin(expr.func, "getattr") and expr.args:
                return self.ext_of(expr.args[0], cls, local)
            return set()
        if isinstance(expr, ast.Name):
            if local and expr.id in local:
                return set(local[expr.id])
            return set(self.ext_names.get(expr.id, ()))
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == "self":
                out: set[int] = set()
                for info in self.mro(cls):
                    out |= self.ext_attrs.get(info.node.name, {}).get(expr.attr, set())
                return out
            q = self.qualname(expr)
            if q and q.startswith("torch.ops."):
                parts = q.split(".")
                return {REGISTERED_OP} if len(parts) > 3 and parts[2] not in ATEN_OP_NAMESPACES else set()
            return self.ext_of(expr.value, cls, local)
        if isinstance(expr, ast.Subscript):
            return self.ext_of(expr.value, cls, local)
        if isinstance(expr, ast.IfExp):
            return self.ext_of(expr.body, cls, local) | self.ext_of(expr.orelse, cls, local)
        if isinstance(expr, (ast.BoolOp, ast.Dict, ast.List, ast.Tuple)):
            items = expr.values if isinstance(expr, (ast.BoolOp, ast.Dict)) else expr.elts
            out = set()
            for v in items:
                out |= self.ext_of(v, cls, local)
            return out
        return set()

    def ext_method_builds(self, func: ast.AST, cls: str | None) -> set[int]:
        """Build ids returned by `self.<method>` when that method hands out the extension."""
        out: set[int] = set()
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            for info in self.mro(cls):
                out |= self.ext_methods.get(info.node.name, {}).get(func.attr, set())
        return out

    def is_ext_method(self, func: ast.AST, cls: str | None) -> bool:
        return bool(self.ext_method_builds(func, cls))

    def is_ext_builder(self, func: ast.AST, cls: str | None) -> bool:
        """A call that builds or hands out the extension (`load_inline`, a cached getter): not compute."""
        if BUILD_FUNCTIONS.get(self.qualname(func) or ""):
            return True
        if isinstance(func, ast.Name) and func.id in self.ext_factories:
            return True
        return self.is_ext_method(func, cls)

    def local_ext(self, fn: ast.AST | None, cls: str | None) -> dict[str, set[int]]:
        """Names bound to the extension inside one function."""
        local: dict[str, set[int]] = {}
        for _ in range(3):
            for name, values in self.local_values(fn).items():
                for v in values:
                    ids = self.ext_of(v, cls, local)
                    if ids:
                        local.setdefault(name, set()).update(ids)
        return local

    def _resolve_extensions(self) -> None:
        """Fixpoint over module names, factory functions and `self` attributes bound to an extension."""
        for _ in range(6):
            before = (
                repr(self.ext_names),
                repr(self.ext_factories),
                repr(self.ext_attrs),
                repr(self.ext_methods),
            )
            for name, values in self.module_values.items():
                for v in values:
                    ids = self.ext_of(v)
                    if ids:
                        self.ext_names.setdefault(name, set()).update(ids)
            for name, fn in self.functions.items():
                local = self.local_ext(fn, None)
                for node in walk_function(fn):
                    if isinstance(node, ast.Return):
                        ids = self.ext_of(node.value, None, local)
                        if ids:
                            self.ext_factories.setdefault(name, set()).update(ids)
            for cname, info in self.classes.items():
                for attr, values in info.attrs.items():
                    for value, method in values:
                        ids = self.ext_of(value, cname, self.local_ext(method, cname))
                        if ids:
                            self.ext_attrs.setdefault(cname, {}).setdefault(attr, set()).update(ids)
            for cname, info in self.classes.items():
                for mname, method in info.methods.items():
                    local = self.local_ext(method, cname)
                    for node in walk_function(method):
                        if isinstance(node, ast.Return):
                            ids = self.ext_of(node.value, cname, local)
                            if ids:
                                self.ext_methods.setdefault(cname, {}).setdefault(mname, set()).update(ids)
            if before == (
                repr(self.ext_names),
                repr(self.ext_factories),
                repr(self.ext_attrs),
                repr(self.ext_methods),
            ):
                break

    # ----------------------------------------------------------------- strings
    def resolve_text(
        self,
        expr: ast.AST | None,
        scope: ast.AST | None,
        sink: list[ast.Constant] | None = None,
        depth: int = 0,
    ) -> tuple[str, bool]:
        """The text of a source-string expression (names, concatenation, f-strings, lists, `dedent`,
        `.format`, `"".join`), and whether every part could be resolved. String constants met on the
        way are appended to `sink`, so their own lines can be reported."""
        if expr is None or depth > 20:
            return "", expr is None

        def sub(e: ast.AST | None, sc: ast.AST | None = scope) -> tuple[str, bool]:
            return self.resolve_text(e, sc, sink, depth + 1)

        if isinstance(expr, ast.Constant):
            if isinstance(expr.value, str):
                if sink is not None:
                    sink.append(expr)
                return expr.value, True
            return "", expr.value is None
        if isinstance(expr, (ast.JoinedStr, ast.List, ast.Tuple)):
            parts = [sub(v) for v in (expr.values if isinstance(expr, ast.JoinedStr) else expr.elts)]
            sep = "" if isinstance(expr, ast.JoinedStr) else "\n"
            return sep.join(p[0] for p in parts), all(p[1] for p in parts)
        if isinstance(expr, ast.FormattedValue):
            return sub(expr.value)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            a, b = sub(expr.left), sub(expr.right)
            return a[0] + b[0], a[1] and b[1]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return sub(expr.left)
        if isinstance(expr, ast.Name):
            local = self.local_values(scope)
            values = local.get(expr.id) or self.module_values.get(expr.id)
            if not values:
                return "", False
            parts = [sub(v, scope if expr.id in local else None) for v in values]
            return "\n".join(p[0] for p in parts), all(p[1] for p in parts)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in (
                "format",
                "replace",
                "strip",
                "lstrip",
                "rstrip",
            ):
                return sub(func.value)
            if isinstance(func, ast.Attribute) and func.attr == "join" and expr.args:
                return sub(expr.args[0])
            if self.qualname(func) in ("textwrap.dedent", "inspect.cleandoc", "builtins.str") and expr.args:
                return sub(expr.args[0])
        return "", False
