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
from dataclasses import dataclass, field

from engine.guard.pyindex import REGISTERED_OP, Function, ModuleIndex, assign_pairs, walk_function
from engine.guard.vocab import (
    ATEN_OP_NAMESPACES,
    BUILTIN_COMPUTE,
    COMPUTE_METHOD_NAMES,
    MEMO_DECORATORS,
    NN_CONTAINERS,
    NN_NON_COMPUTE_MODULES,
    NN_NON_MODULE_CLASSES,
    TENSOR_GLUE_METHODS,
    TENSOR_NON_TENSOR_ATTRS,
    TENSOR_QUERY_METHODS,
    TENSOR_TENSOR_ATTRS,
    TORCH_ALLOWED_CALLS,
    TORCH_LEFT_TO_WHOLE_FILE_PREFIXES,
)

RawFinding = tuple[str, int, str]
HotNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda

# torch.* results that are not tensors (queries, dtypes, context managers).
_TORCH_NON_TENSOR = frozenset(
    {
        "is_tensor",
        "is_floating_point",
        "is_complex",
        "numel",
        "Size",
        "device",
        "get_default_dtype",
        "promote_types",
        "result_type",
        "can_cast",
        "finfo",
        "iinfo",
        "no_grad",
        "inference_mode",
        "enable_grad",
        "is_grad_enabled",
        "is_inference_mode_enabled",
        "broadcast_shapes",
        "_assert",
    }
)
_SCALAR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "complex"})
_KEY_CALLS = frozenset({"data_ptr", "id", "hash", "untyped_storage", "storage", "_cdata"})
_LAYER_TENSOR_ATTRS = ("weight", "bias", "running_mean", "running_var")


@dataclass
class HotFn:
    """One function on the hot path, with what is known about its parameters and result."""

    node: HotNode
    cls: str | None
    skip: int
    tensor_params: set[str] = field(default_factory=set)
    returns_tensor: bool = False


def _is_nn_module_qualname(q: str | None) -> bool:
    if not q or not q.startswith("torch.nn."):
        return False
    last = q.rsplit(".", 1)[-1]
    return (
        last[:1].isupper() and not q.startswith("torch.nn.functional.") and last not in NN_NON_MODULE_CLASSES
    )


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
    """One pass over one hot-path function: infer which names are tensors, resolve calls, and (when
    `emit`) report compute, fallbacks and caches."""

    def __init__(self, hp: HotPath, fn: HotFn, emit: bool) -> None:
        self.hp, self.fn, self.emit = hp, fn, emit
        self.idx = hp.index
        self.cls = fn.cls
        self.local_ext = self.idx.local_ext(fn.node, fn.cls)
        self.tensors: set[str] = set(fn.tensor_params)
        self.key_names: set[str] = set()
        self.local_kinds: dict[str, list[ast.expr]] = {}
        self.local_defs = {
            n.name: n
            for n in walk_function(fn.node)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        attrs = self.idx.class_attrs(fn.cls)
        self.attr_values = {name: [v for v, _ in values] for name, values in attrs.items()}
        self.tensor_attrs = {
            name for name, values in self.attr_values.items() if any(map(self._is_init_tensor, values))
        }
        self.layer_attrs = {
            name
            for name, values in self.attr_values.items()
            if any(
                _is_nn_module_qualname(self.idx.qualname(v.func)) for v in values if isinstance(v, ast.Call)
            )
        }

    # ------------------------------------------------------------------ reporting
    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        if self.emit:
            self.hp.findings.append((rule, getattr(node, "lineno", self.fn.node.lineno), message))

    @staticmethod
    def src(node: ast.AST) -> str:
        text = ast.unparse(node)
        return text if len(text) <= 60 else text[:57] + "..."

    # ------------------------------------------------------------------ type heuristic
    def _is_init_tensor(self, value: ast.expr) -> bool:
        """Whether a value stored on `self` (outside the hot path) is a tensor or parameter."""
        if isinstance(value, ast.Call):
            q = self.idx.qualname(value.func) or ""
            if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"):
                return True
            if (
                q.startswith("torch.")
                and not _is_nn_module_qualname(q)
                and not q.startswith(("torch.cuda", "torch.nn."))
            ):
                return q[6:] not in _TORCH_NON_TENSOR
            if isinstance(value.func, ast.Attribute) and value.func.attr in TENSOR_GLUE_METHODS:
                return self._is_init_tensor(value.func.value)
        return isinstance(value, ast.Attribute) and value.attr in _LAYER_TENSOR_ATTRS

    def qual(self, expr: ast.AST) -> str | None:
        return self.idx.qualname(expr)

    def is_tensor(self, e: ast.AST | None) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.tensors
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return e.attr in self.tensor_attrs
            if (
                isinstance(e.value, ast.Attribute)
                and isinstance(e.value.value, ast.Name)
                and e.value.value.id == "self"
                and e.value.attr in self.layer_attrs
            ):
                return e.attr in _LAYER_TENSOR_ATTRS
            if e.attr in TENSOR_NON_TENSOR_ATTRS:
                return False
            return e.attr in TENSOR_TENSOR_ATTRS and self.is_tensor(e.value)
        if isinstance(e, ast.Subscript):
            return self.is_tensor(e.value)
        if isinstance(e, ast.Call):
            return self._call_returns_tensor(e)
        if isinstance(e, ast.BinOp):
            return self.is_tensor(e.left) or self.is_tensor(e.right)
        if isinstance(e, ast.UnaryOp) and not isinstance(e.op, ast.Not):
            return self.is_tensor(e.operand)
        if isinstance(e, ast.IfExp):
            return self.is_tensor(e.body) or self.is_tensor(e.orelse)
        if isinstance(e, ast.Compare):
            return not all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops) and any(
                map(self.is_tensor, [e.left, *e.comparators])
            )
        if isinstance(e, (ast.NamedExpr, ast.Starred)):
            return self.is_tensor(e.value)
        return False

    def _call_returns_tensor(self, call: ast.Call) -> bool:
        func = self._callee(call)
        if self.idx.ext_of(func, self.cls, self.local_ext):
            return True
        q = self.qual(func)
        if q:
            if q.startswith("torch.nn.functional.") or q.startswith("torch.ops."):
                return True
            if q.startswith("torch."):
                rest = q[6:]
                return not (rest in _TORCH_NON_TENSOR or rest.startswith(("cuda.", "backends.", "nn.")))
            return False
        if isinstance(func, ast.Attribute):
            if self.is_tensor(func.value):
                return func.attr not in TENSOR_QUERY_METHODS
            if isinstance(func.value, ast.Name) and func.value.id == "self":
                if func.attr in self.layer_attrs:
                    return True
                found = self.idx.method(self.cls, func.attr)
                if found:
                    return self._returns_tensor(found[1])
                return any(
                    self._returns_tensor(t) for t in self._kind_functions(self.attr_values.get(func.attr, []))
                )
        if isinstance(func, ast.Name):
            target = self.local_defs.get(func.id) or self.idx.functions.get(func.id)
            if target is not None:
                return self._returns_tensor(target)
        return False

    def _returns_tensor(self, node: HotNode) -> bool:
        fn = self.hp.fns.get(id(node))
        return bool(fn and fn.returns_tensor)

    def _kind_functions(self, values: list[ast.expr]) -> list[HotNode]:
        out: list[HotNode] = []
        for v in values:
            if isinstance(v, ast.Lambda):
                out.append(v)
            elif isinstance(v, ast.Name) and v.id in self.idx.functions:
                out.append(self.idx.functions[v.id])
        return out

    def _has_key_call(self, e: ast.AST) -> bool:
        for n in ast.walk(e):
            if isinstance(n, ast.Call):
                name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                if name in _KEY_CALLS:
                    return True
            if isinstance(n, ast.Name) and n.id in self.key_names:
                return True
        return False

    # ------------------------------------------------------------------ inference
    def infer(self) -> None:
        for _ in range(6):
            before = (len(self.tensors), len(self.key_names), len(self.local_kinds))
            for node in walk_function(self.fn.node):
                for target, value in assign_pairs(node):
                    self._bind(target, value, self.is_tensor(value))
                    if isinstance(target, ast.Name) and self._has_key_call(value):
                        self.key_names.add(target.id)
                if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    self._bind(node.target, node.iter, self.is_tensor(node.iter))
                    kinds = self._module_values(node.iter)
                    if kinds and isinstance(node.target, ast.Name):
                        self.local_kinds[node.target.id] = kinds
            if before == (len(self.tensors), len(self.key_names), len(self.local_kinds)):
                break
        returns = [
            n.value for n in walk_function(self.fn.node) if isinstance(n, ast.Return) and n.value is not None
        ]
        if isinstance(self.fn.node, ast.Lambda):
            returns = [self.fn.node.body]
        tensor_result = any(
            self.is_tensor(r) or (isinstance(r, ast.Tuple) and any(map(self.is_tensor, r.elts)))
            for r in returns
        )
        if tensor_result and not self.fn.returns_tensor:
            self.fn.returns_tensor = True
            self.hp.changed = True

    def _bind(self, target: ast.AST, value: ast.AST, tensor: bool) -> None:
        if not tensor:
            return
        if isinstance(target, ast.Name):
            self.tensors.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._bind(elt.value if isinstance(elt, ast.Starred) else elt, value, tensor)

    def _module_values(self, e: ast.AST) -> list[ast.expr]:
        """The values stored on `self.<attr>` (or a module name) when `e` refers to one: the modules a
        container attribute holds, the layer an attribute holds, the function it aliases."""
        while isinstance(e, ast.Subscript):
            e = e.value
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            return self.attr_values.get(e.attr, [])
        if isinstance(e, ast.Name):
            if e.id in self.local_kinds:
                return self.local_kinds[e.id]
            return self.idx.module_values.get(e.id, [])
        return []

    # ------------------------------------------------------------------ calls
    def run(self) -> None:
        self.infer()
        node = self.fn.node
        if self.emit and not isinstance(node, ast.Lambda):
            self._check_memo(node)
        for n in walk_function(node):
            if isinstance(n, ast.Call):
                self.visit_call(n)
            if self.emit:
                self.check_node(n)

    def _callee(self, call: ast.Call) -> ast.expr:
        """The called expression, with `getattr(obj, "name")` read as `obj.name`."""
        func = call.func
        if isinstance(func, ast.Call) and self.idx.is_builtin(func.func, "getattr") and len(func.args) >= 2:
            name = func.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                return ast.copy_location(
                    ast.Attribute(value=func.args[0], attr=name.value, ctx=ast.Load()), func
                )
        return func

    def visit_call(self, call: ast.Call) -> None:
        func = self._callee(call)
        if (
            self.idx.is_builtin(func, "getattr")
            and len(call.args) >= 2
            and isinstance(call.args[1], ast.Constant)
        ):
            return  # `getattr(obj, "name")` itself: judged where it is called (its qualname resolves through it)
        if self.idx.is_ext_builder(func, self.cls):
            return  # building or fetching the extension (lazily, in forward) is not compute
        ids = self.idx.ext_of(func, self.cls, self.local_ext)
        if ids:
            self.hp.ext_builds |= ids
            return
        q = self.qual(func)
        if q:
            self.qualified_call(call, q)
            return
        if isinstance(func, ast.Name):
            self.name_call(call, func.id)
        elif isinstance(func, ast.Attribute):
            self.attribute_call(call, func)
        elif isinstance(func, ast.Subscript):
            self.values_call(call, self._module_values(func), self.src(func))
        elif isinstance(func, ast.Call):  # `Block()(x)`, `nn.ReLU()(x)`: build and call at once
            self.values_call(call, [func], self.src(func))

    def qualified_call(self, call: ast.Call, q: str) -> None:
        last = q.rsplit(".", 1)[-1]
        if q.startswith("torch.nn.functional."):
            self.flag("functional-in-forward", call, f"`{q}` computes with PyTorch on the hot path")
        elif _is_nn_module_qualname(q):
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
            if any(self.is_tensor(a) for a in call.args):
                self.flag(
                    "torch-compute-in-forward", call, f"`{q}` computes on tensor data outside the kernel"
                )
        elif q.startswith("builtins."):
            if last in BUILTIN_COMPUTE and any(self.is_tensor(a) for a in call.args):
                self.flag("torch-compute-in-forward", call, f"the builtin `{last}()` computes on a tensor")
        elif q.split(".")[0] in self.idx.functions or q in self.idx.classes:
            self.name_call(call, q.split(".")[0])

    def name_call(self, call: ast.Call, name: str) -> None:
        if name in self.local_defs:
            self.enter(self.local_defs[name], self.cls, 0, call)
        elif name in self.idx.functions:
            self.enter(self.idx.functions[name], None, 0, call)
        elif name in self.idx.classes:
            self.instantiate(call, name)
        elif name in self.local_kinds or name in self.idx.module_values:
            self.values_call(call, self._module_values(ast.Name(id=name)), name)
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
            elif attr in self.attr_values:
                self.values_call(call, self.attr_values[attr], f"self.{attr}")
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
        if self.is_tensor(base):
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
        if isinstance(base, ast.Name) and base.id not in self.tensors and self.qual(base) is None:
            if base.id in self.local_kinds or base.id in self.idx.module_values:
                self.values_call(call, self._module_values(base), self.src(func), method=attr)
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
            q = self.qual(value)
            if isinstance(value, ast.Call) and self.qual(value.func) == "functools.partial" and value.args:
                q = self.qual(value.args[0])
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
                sq = self.qual(sub.func)
                if _is_nn_module_qualname(sq):
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
                if _is_nn_module_qualname(q) and q.rsplit(".", 1)[-1] not in NN_NON_COMPUTE_MODULES:
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
                if self.is_tensor(a.value):
                    marked.update(params[i:])
                    if args.vararg:
                        marked.add(args.vararg.arg)
                break
            if self.is_tensor(a):
                if i < len(params):
                    marked.add(params[i])
                elif args.vararg:
                    marked.add(args.vararg.arg)
        for kw in call.keywords:
            if kw.arg in names and self.is_tensor(kw.value):
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
        if (
            isinstance(n, ast.BinOp)
            and (self.is_tensor(n.left) or self.is_tensor(n.right))
            or isinstance(n, ast.UnaryOp)
            and not isinstance(n.op, ast.Not)
            and self.is_tensor(n.operand)
        ):
            self.flag(
                "tensor-arithmetic-in-forward", n, f"`{self.src(n)}` is tensor arithmetic done by PyTorch"
            )
        elif isinstance(n, ast.AugAssign) and (self.is_tensor(n.target) or self.is_tensor(n.value)):
            self.flag(
                "tensor-arithmetic-in-forward",
                n,
                f"`{self.src(n)}` is in-place tensor arithmetic done by PyTorch",
            )
        elif isinstance(n, ast.Compare):
            if not all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in n.ops) and any(
                map(self.is_tensor, [n.left, *n.comparators])
            ):
                self.flag(
                    "tensor-arithmetic-in-forward",
                    n,
                    f"`{self.src(n)}` compares tensors elementwise in PyTorch",
                )
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) and self._has_key_call(n.left):
                self.flag("output-cache", n, f"`{self.src(n)}` looks results up by tensor identity")
        elif isinstance(n, ast.Subscript):
            self._check_subscript(n)
        elif isinstance(n, (ast.Try, getattr(ast, "TryStar", ast.Try))) and n.handlers:
            self.flag(
                "try-except-fallback",
                n,
                "`try`/`except` on the hot path: a failing kernel must fail, not fall back",
            )
        elif isinstance(n, (ast.With, ast.AsyncWith)):
            for item in n.items:
                ctx = item.context_expr
                if isinstance(ctx, ast.Call) and (self.qual(ctx.func) or "").endswith("suppress"):
                    self.flag(
                        "try-except-fallback", n, "`suppress(...)` on the hot path swallows kernel errors"
                    )
        elif isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
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
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            self.flag("state-in-forward", n, f"the hot path rebinds `{', '.join(n.names)}` outside itself")
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr
            in (
                "get",
                "setdefault",
                "pop",
                "__contains__",
                "__getitem__",
                "__setitem__",
            )
            and n.args
            and self._has_key_call(n.args[0])
        ):
            self.flag("output-cache", n, f"`{self.src(n)}` looks results up by tensor identity")

    def _check_subscript(self, n: ast.Subscript) -> None:
        index = n.slice
        if self._has_key_call(index):
            self.flag("output-cache", n, f"`{self.src(n)}` keys a lookup on tensor identity (data_ptr/id)")
            return
        if isinstance(n.ctx, ast.Store) and self._is_dict_store(n.value):
            self.flag("output-cache", n, f"`{self.src(n)}` stores results in a dict that survives the call")
            return
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        if self.is_tensor(n.value) and any(self.is_tensor(p) for p in parts):
            self.flag(
                "torch-compute-in-forward",
                n,
                f"`{self.src(n)}` indexes with a tensor (a PyTorch gather/scatter)",
            )

    def _is_dict_store(self, container: ast.AST) -> bool:
        values = self._module_values(container)
        if isinstance(container, ast.Name) and container.id in self.idx.local_values(self.fn.node):
            return False  # a local dict dies with the call
        return any(
            isinstance(v, (ast.Dict, ast.DictComp))
            or (
                isinstance(v, ast.Call)
                and (self.qual(v.func) or "").rsplit(".", 1)[-1]
                in ("dict", "OrderedDict", "defaultdict", "WeakValueDictionary", "WeakKeyDictionary")
            )
            for v in values
        )
