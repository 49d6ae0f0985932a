"""The hot path: `ModelNew.forward` and everything it calls in the file, checked for PyTorch compute.

Types are not known statically, so tensors are recognised by a documented heuristic. An expression
is a tensor when it is
- a parameter of `forward` (except ones whose default or annotation is a Python scalar or string),
- a parameter of a hot-path helper that some hot-path call site passes a tensor to,
- `self.<attr>` assigned an `nn.Parameter`, a buffer or a `torch.*` factory result in the class,
  or `self.<layer>.weight`/`.bias` of a `torch.nn` layer held by the class,
- the result of a tensor-producing call: a `torch.*` function other than the query ones, a tensor
  method other than the query ones (`size`, `numel`, `item`, ...), an extension call, a hot-path
  helper that returns a tensor,
- a name assigned any of the above anywhere in the function (flow-insensitive), an index or slice of
  a tensor, a tensor view attribute (`.T`, `.real`, ...), or an operator with a tensor operand.
Everything else (sizes from `.shape`/`.size()`/`.numel()`, config attributes such as `self.eps`, loop
counters) is treated as a Python value, so size arithmetic is never flagged. The price is that a
tensor hidden behind an unknown object can escape notice; the runtime guards cover that side.
"""

from __future__ import annotations

import ast

from engine.guard.hottypes import FnTypes, HotFn, HotNode, is_nn_module_qualname
from engine.guard.pyindex import REGISTERED_OP, Function, ModuleIndex, walk_function
from engine.guard.vocab import (
    ATEN_OP_NAMESPACES,
    BUILTIN_COMPUTE,
    COMPUTE_METHOD_NAMES,
    MEMO_DECORATORS,
    NN_CONTAINERS,
    NN_NON_COMPUTE_MODULES,
    TENSOR_GLUE_METHODS,
    TENSOR_QUERY_METHODS,
    TORCH_ALLOWED_CALLS,
    TORCH_LEFT_TO_WHOLE_FILE_PREFIXES,
)

RawFinding = tuple[str, int, str]

_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "complex"})
_TRY_STAR = getattr(ast, "TryStar", ast.Try)  # `try`/`except*` (Python 3.11+)
_LOOKUP_METHODS = ("get", "setdefault", "pop", "__contains__", "__getitem__", "__setitem__")


class HotPath:
    """Finds the hot path from `ModelNew.forward` and collects its findings."""

    def __init__(self, index: ModuleIndex, roots: list[tuple[str, Function]]) -> None:
        """`roots`: (class, method) pairs the evaluator's call enters: `forward`, and `__call__` when the
        candidate overrides it (an override would bypass `forward` entirely)."""
        self.index = index
        self.fns: dict[int, HotFn] = {}
        self.ext_builds: set[int] = set()
        self.unresolved: list[tuple[int, str]] = []
        self.findings: list[RawFinding] = []
        self.changed = False
        for cls, method in roots:
            self.fns[id(method)] = self._root(cls, method)

    @staticmethod
    def _root(cls: str, method: Function) -> HotFn:
        root = HotFn(method, cls, 1)
        args = method.args
        positional = [a.arg for a in args.posonlyargs + args.args]
        defaults = dict(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
        for a in (args.posonlyargs + args.args)[1:] + args.kwonlyargs:
            default = defaults.get(a.arg)
            scalar_default = isinstance(default, ast.Constant) and default.value is not None
            scalar_ann = isinstance(a.annotation, ast.Name) and a.annotation.id in _SCALAR_ANNOTATIONS
            if not (scalar_default or scalar_ann):
                root.tensor_params.add(a.arg)
        if args.vararg:
            root.tensor_params.add(args.vararg.arg)
        return root

    def run(self) -> None:
        for _ in range(12):
            self.changed = False
            for fn in list(self.fns.values()):
                _FnPass(self, fn, emit=False).run()
            if not self.changed:
                break
        self.ext_builds.clear()
        self.unresolved.clear()
        for fn in list(self.fns.values()):
            _FnPass(self, fn, emit=True).run()

    def add(self, node: HotNode, cls: str | None, skip: int) -> HotFn:
        fn = self.fns.get(id(node))
        if fn is None:
            fn = self.fns[id(node)] = HotFn(node, cls, skip)
            self.changed = True
        return fn


class _FnPass:
    """One pass over one hot-path function: infer which names are tensors (``FnTypes``, in
    ``engine.guard.hottypes``), resolve calls (adding callees to the hot path), and (when `emit`)
    report compute, fallbacks and caches."""

    def __init__(self, hp: HotPath, fn: HotFn, emit: bool) -> None:
        self.hp, self.fn, self.emit = hp, fn, emit
        self.idx = hp.index
        self.cls = fn.cls
        self.types = FnTypes(hp.index, fn, hp.fns)

    # ------------------------------------------------------------------ reporting
    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        if self.emit:
            self.hp.findings.append((rule, getattr(node, "lineno", self.fn.node.lineno), message))

    @staticmethod
    def src(node: ast.AST) -> str:
        text = ast.unparse(node)
        return text if len(text) <= 60 else text[:57] + "..."

    # ------------------------------------------------------------------ calls
    def run(self) -> None:
        if self.types.infer():
            self.hp.changed = True
        node = self.fn.node
        if self.emit and not isinstance(node, ast.Lambda):
            self._check_memo(node)
        for n in walk_function(node):
            if isinstance(n, ast.Call):
                self.visit_call(n)
            if self.emit:
                self.check_node(n)

    def visit_call(self, call: ast.Call) -> None:
        func = self.types.callee(call)
        if (
            self.idx.is_builtin(func, "getattr")
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Constant)
        ):
            return  # `getattr(obj, "name")` itself: judged where it is called (its qualname resolves through it)
        if self.idx.is_ext_builder(func, self.cls):
            return  # building or fetching the extension (lazily, in forward) is not compute
        ids = self.idx.ext_of(func, self.cls, self.types.local_ext)
        if ids:
            self.hp.ext_builds |= ids
            return
        q = self.idx.qualname(func)
        if q:
            self.qualified_call(call, q)
            return
        if isinstance(func, ast.Name):
            self.name_call(call, func.id)
        elif isinstance(func, ast.Attribute):
            self.attribute_call(call, func)
        elif isinstance(func, ast.Subscript):
            self.values_call(call, self.types.module_values(func), self.src(func))
        elif isinstance(func, ast.Call):  # `Block()(x)`, `nn.ReLU()(x)`: build and call at once
            self.values_call(call, [func], self.src(func))

    def qualified_call(self, call: ast.Call, q: str) -> None:
        last = q.rsplit(".", 1)[-1]
        if q.startswith("torch.nn.functional."):
            self.flag("functional-in-forward", call, f"`{q}` computes with PyTorch on the hot path")
        elif is_nn_module_qualname(q):
            if last not in NN_NON_COMPUTE_MODULES and last not in NN_CONTAINERS:
                self.flag(
                    "submodule-compute-in-forward",
                    call,
                    f"builds and runs the PyTorch layer `{q}` on the hot path",
                )
        elif q.startswith("torch.ops."):
            parts = q.split(".")
            if len(parts) > 2 and parts[2] in ATEN_OP_NAMESPACES:
                self.flag("torch-compute-in-forward", call, f"`{q}` is an ATen op called on the hot path")
            else:
                self.hp.ext_builds.add(REGISTERED_OP)
        elif q.startswith("torch.Tensor."):
            if last not in TENSOR_GLUE_METHODS and last not in TENSOR_QUERY_METHODS:
                self.flag("torch-compute-in-forward", call, f"`{q}` computes with PyTorch on the hot path")
        elif q.startswith("torch."):
            rest = q[6:]
            if rest in TORCH_ALLOWED_CALLS or rest.startswith(TORCH_LEFT_TO_WHOLE_FILE_PREFIXES):
                return
            self.flag(
                "torch-compute-in-forward",
                call,
                f"`{q}` computes with PyTorch on the hot path; "
                "only allocation, views and queries are allowed around the kernel call",
            )
        elif q.startswith(("numpy.", "scipy.")):
            if any(self.types.is_tensor(a) for a in call.args):
                self.flag(
                    "torch-compute-in-forward", call, f"`{q}` computes on tensor data outside the kernel"
                )
        elif q.startswith("builtins."):
            if last in BUILTIN_COMPUTE and any(self.types.is_tensor(a) for a in call.args):
                self.flag("torch-compute-in-forward", call, f"the builtin `{last}()` computes on a tensor")
        elif q.split(".")[0] in self.idx.functions or q in self.idx.classes:
            self.name_call(call, q.split(".")[0])

    def name_call(self, call: ast.Call, name: str) -> None:
        if name in self.types.local_defs:
            self.enter(self.types.local_defs[name], self.cls, 0, call)
        elif name in self.idx.functions:
            self.enter(self.idx.functions[name], None, 0, call)
        elif name in self.idx.classes:
            self.instantiate(call, name)
        elif name in self.types.local_kinds or name in self.idx.module_values:
            self.values_call(call, self.types.module_values(ast.Name(id=name)), name)
        elif name in self.idx.local_values(self.fn.node):
            values = self.idx.local_values(self.fn.node)[name]
            lambdas = [v for v in values if isinstance(v, ast.Lambda)]
            for lam in lambdas:
                self.enter(lam, self.cls, 0, call)
            if not lambdas:
                self.hp.unresolved.append((call.lineno, name))
        else:
            self.hp.unresolved.append((call.lineno, name))

    def attribute_call(self, call: ast.Call, func: ast.Attribute) -> None:
        base, attr = func.value, func.attr
        if isinstance(base, ast.Name) and base.id == "self":
            found = self.idx.method(self.cls, attr)
            if found:
                self.enter(found[1], found[0], 0 if self._is_static(found[1]) else 1, call)
            elif attr in self.types.attr_values:
                self.values_call(call, self.types.attr_values[attr], f"self.{attr}")
            else:
                self.hp.unresolved.append((call.lineno, f"self.{attr}"))
            return
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
            for info in self.idx.mro(self.cls)[1:]:
                if attr in info.methods:
                    self.enter(info.methods[attr], info.node.name, 1, call)
                    break
            return
        if isinstance(base, ast.Name) and base.id in self.idx.classes:
            info = self.idx.classes[base.id]
            if attr == "apply" and any(q.endswith("autograd.Function") for q in info.base_qualnames):
                if "forward" in info.methods:
                    self.enter(info.methods["forward"], base.id, 1, call)
                return
            if attr in info.methods:
                method = info.methods[attr]
                self.enter(method, base.id, 0 if self._is_static(method) else 1, call)
            return
        if self.types.is_tensor(base):
            if attr not in TENSOR_GLUE_METHODS and attr not in TENSOR_QUERY_METHODS:
                self.flag(
                    "torch-compute-in-forward",
                    call,
                    f"the tensor method `.{attr}()` computes with PyTorch on the hot path",
                )
            return
        if attr in COMPUTE_METHOD_NAMES:
            self.flag("torch-compute-in-forward", call, f"`.{attr}()` computes with PyTorch on the hot path")
            return
        if (
            isinstance(base, ast.Name)
            and base.id not in self.types.tensors
            and self.idx.qualname(base) is None
        ):
            if base.id in self.types.local_kinds or base.id in self.idx.module_values:
                self.values_call(call, self.types.module_values(base), self.src(func), method=attr)
            elif base.id not in self.idx.local_values(self.fn.node):
                self.hp.unresolved.append((call.lineno, self.src(func)))

    def values_call(self, call: ast.Call, values: list[ast.expr], what: str, method: str = "forward") -> None:
        """A call of something stored in an attribute or name: a layer, an in-file module, a lambda, an alias."""
        resolved = False
        for value in values:
            if isinstance(value, ast.Lambda):
                self.enter(value, self.cls, 0, call)
                resolved = True
                continue
            q = self.idx.qualname(value)
            if (
                isinstance(value, ast.Call)
                and self.idx.qualname(value.func) == "functools.partial"
                and value.args
            ):
                q = self.idx.qualname(value.args[0])
            if q and not isinstance(value, ast.Call):
                self.qualified_call(call, q)
                resolved = True
                continue
            if isinstance(value, ast.Name) and value.id in self.idx.functions:
                self.enter(self.idx.functions[value.id], None, 0, call)
                resolved = True
                continue
            if (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id == "self"
            ):
                found = self.idx.method(self.cls, value.attr)
                if found:
                    self.enter(found[1], found[0], 1, call)
                    resolved = True
                    continue
            for sub in ast.walk(value):
                if not isinstance(sub, ast.Call):
                    continue
                sq = self.idx.qualname(sub.func)
                if is_nn_module_qualname(sq):
                    last = (sq or "").rsplit(".", 1)[-1]
                    resolved = True
                    if last in NN_CONTAINERS:
                        self.container_members(call, method, what)
                    if last not in NN_NON_COMPUTE_MODULES and last not in NN_CONTAINERS:
                        self.flag(
                            "submodule-compute-in-forward",
                            call,
                            f"`{what}` is the PyTorch layer `{sq}`; calling it is PyTorch compute",
                        )
                elif isinstance(sub.func, ast.Name) and sub.func.id in self.idx.classes:
                    resolved = True
                    self.module_call(call, sub.func.id, method, what)
        if not resolved:
            self.hp.unresolved.append((call.lineno, what))

    def container_members(self, call: ast.Call, method: str, what: str) -> None:
        """Calling (or iterating) an `nn.Sequential`/`ModuleList` built from a list: its members are not
        visible in the container's arguments (`nn.ModuleList(layers)`, `nn.Sequential(*make_block())`), so
        every in-file module class the owner's `__init__` instantiates (nested helpers included) joins the
        hot path. Over-approximate on purpose: a kernel called through such a member is really called."""
        if not self.cls:
            return
        found = self.idx.method(self.cls, "__init__")
        if not found:
            return
        for sub in ast.walk(found[1]):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Name)
                and sub.func.id in self.idx.classes
                and sub.func.id not in (self.cls, "Model")
            ):
                self.module_call(call, sub.func.id, method, what)

    def module_call(self, call: ast.Call, cname: str, method: str, what: str) -> None:
        """Calling an instance of an in-file class: its `forward` (or `__call__`) joins the hot path."""
        for name in (method,) if method != "forward" else ("forward", "__call__"):
            found = self.idx.method(cname, name)
            if found:
                self.enter(found[1], found[0], 1, call)
                return
        for info in self.idx.mro(cname):
            for q in info.base_qualnames:
                if is_nn_module_qualname(q) and q.rsplit(".", 1)[-1] not in NN_NON_COMPUTE_MODULES:
                    self.flag(
                        "submodule-compute-in-forward",
                        call,
                        f"`{what}` inherits `forward` from the PyTorch layer `{q}`",
                    )
                    return

    def instantiate(self, call: ast.Call, cname: str) -> None:
        found = self.idx.method(cname, "__init__")
        if found:
            self.enter(found[1], found[0], 1, call)

    def enter(self, node: HotNode, cls: str | None, skip: int, call: ast.Call) -> None:
        """Add a function to the hot path and mark the parameters this call passes tensors to."""
        fn = self.hp.add(node, cls, skip)
        args = node.args
        params = [a.arg for a in args.posonlyargs + args.args][skip:]
        names = set(params) | {a.arg for a in args.kwonlyargs}
        marked: set[str] = set()
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Starred):
                if self.types.is_tensor(a.value):
                    marked.update(params[i:])
                    if args.vararg:
                        marked.add(args.vararg.arg)
                break
            if self.types.is_tensor(a):
                if i < len(params):
                    marked.add(params[i])
                elif args.vararg:
                    marked.add(args.vararg.arg)
        for kw in call.keywords:
            if kw.arg in names and self.types.is_tensor(kw.value):
                marked.add(kw.arg)
        if not marked <= fn.tensor_params:
            fn.tensor_params |= marked
            self.hp.changed = True

    @staticmethod
    def _is_static(fn: Function) -> bool:
        return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)

    # ------------------------------------------------------------------ non-call checks
    def _check_memo(self, node: Function) -> None:
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            n_params = len(node.args.posonlyargs + node.args.args) - self.fn.skip + len(node.args.kwonlyargs)
            if name in MEMO_DECORATORS and (n_params > 0 or node.args.vararg):
                self.flag(
                    "output-cache",
                    node,
                    f"`{node.name}` is memoised with `@{name}`: results are reused across calls",
                )

    def check_node(self, n: ast.AST) -> None:
        """The rules judged on one node of the hot path (calls are resolved by ``visit_call``)."""
        if isinstance(n, (ast.BinOp, ast.UnaryOp, ast.AugAssign, ast.Compare)) and self._check_arithmetic(n):
            return  # an augmented assignment that is tensor arithmetic is not also judged as state
        if isinstance(n, ast.Subscript):
            self._check_subscript(n)
        elif isinstance(n, (ast.Try, _TRY_STAR, ast.With, ast.AsyncWith)):
            self._check_fallback(n)
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Global, ast.Nonlocal)):
            self._check_state(n)
        elif isinstance(n, ast.Call):
            self._check_cache_lookup(n)

    def _check_arithmetic(self, n: ast.BinOp | ast.UnaryOp | ast.AugAssign | ast.Compare) -> bool:
        """Tensor arithmetic and elementwise comparisons; True when ``n`` was judged here."""
        if (
            isinstance(n, ast.BinOp)
            and (self.types.is_tensor(n.left) or self.types.is_tensor(n.right))
            or isinstance(n, ast.UnaryOp)
            and not isinstance(n.op, ast.Not)
            and self.types.is_tensor(n.operand)
        ):
            self.flag(
                "tensor-arithmetic-in-forward", n, f"`{self.src(n)}` is tensor arithmetic done by PyTorch"
            )
        elif isinstance(n, ast.AugAssign) and (
            self.types.is_tensor(n.target) or self.types.is_tensor(n.value)
        ):
            self.flag(
                "tensor-arithmetic-in-forward",
                n,
                f"`{self.src(n)}` is in-place tensor arithmetic done by PyTorch",
            )
        elif isinstance(n, ast.Compare):
            if not all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in n.ops) and any(
                map(self.types.is_tensor, [n.left, *n.comparators])
            ):
                self.flag(
                    "tensor-arithmetic-in-forward",
                    n,
                    f"`{self.src(n)}` compares tensors elementwise in PyTorch",
                )
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) and self.types.has_key_call(n.left):
                self.flag("output-cache", n, f"`{self.src(n)}` looks results up by tensor identity")
        else:
            return False
        return True

    def _check_fallback(self, n: ast.Try | ast.With | ast.AsyncWith) -> None:
        """``try``/``except`` and ``suppress(...)``: a failing kernel must fail, not fall back to PyTorch."""
        if isinstance(n, (ast.Try, _TRY_STAR)):
            if n.handlers:
                self.flag(
                    "try-except-fallback",
                    n,
                    "`try`/`except` on the hot path: a failing kernel must fail, not fall back",
                )
            return
        for item in n.items:
            ctx = item.context_expr
            if isinstance(ctx, ast.Call) and (self.idx.qualname(ctx.func) or "").endswith("suppress"):
                self.flag("try-except-fallback", n, "`suppress(...)` on the hot path swallows kernel errors")

    def _check_state(self, n: ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Global | ast.Nonlocal) -> None:
        """Stores to ``self.<attr>`` and ``global``/``nonlocal`` rebinding: state kept across calls."""
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            self.flag("state-in-forward", n, f"the hot path rebinds `{', '.join(n.names)}` outside itself")
            return
        targets = n.targets if isinstance(n, ast.Assign) else [n.target]
        for t in targets:
            for sub in ast.walk(t):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                    and (isinstance(sub.ctx, ast.Store))
                ):
                    self.flag(
                        "state-in-forward",
                        n,
                        f"the hot path stores `self.{sub.attr}`: state kept across calls",
                    )

    def _check_cache_lookup(self, n: ast.Call) -> None:
        """``cache.get(x.data_ptr())`` and the like: results looked up by tensor identity."""
        if (
            isinstance(n.func, ast.Attribute)
            and n.func.attr in _LOOKUP_METHODS
            and n.args
            and self.types.has_key_call(n.args[0])
        ):
            self.flag("output-cache", n, f"`{self.src(n)}` looks results up by tensor identity")

    def _check_subscript(self, n: ast.Subscript) -> None:
        index = n.slice
        if self.types.has_key_call(index):
            self.flag("output-cache", n, f"`{self.src(n)}` keys a lookup on tensor identity (data_ptr/id)")
            return
        if isinstance(n.ctx, ast.Store) and self._is_dict_store(n.value):
            self.flag("output-cache", n, f"`{self.src(n)}` stores results in a dict that survives the call")
            return
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        if self.types.is_tensor(n.value) and any(self.types.is_tensor(p) for p in parts):
            self.flag(
                "torch-compute-in-forward",
                n,
                f"`{self.src(n)}` indexes with a tensor (a PyTorch gather/scatter)",
            )

    def _is_dict_store(self, container: ast.AST) -> bool:
        values = self.types.module_values(container)
        if isinstance(container, ast.Name) and container.id in self.idx.local_values(self.fn.node):
            return False  # a local dict dies with the call
        return any(
            isinstance(v, (ast.Dict, ast.DictComp))
            or (
                isinstance(v, ast.Call)
                and (self.idx.qualname(v.func) or "").rsplit(".", 1)[-1]
                in ("dict", "OrderedDict", "defaultdict", "WeakValueDictionary", "WeakKeyDictionary")
            )
            for v in values
        )
