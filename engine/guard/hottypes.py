"""Type inference for the hot path: what a name or an expression in one hot-path function is.

The static guard (``engine.guard.hotpath``) refuses PyTorch compute on tensors, so it must know which
values are tensors, which are in-file modules or layers, which calls reach the compiled extension and
which names hold tensor identities (``data_ptr()``, ``id()``) used as cache keys. Types are not known
statically; the heuristic is the one ``engine.guard.hotpath`` documents, and it errs towards Python
values so that size arithmetic is never flagged.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.guard.pyindex import ModuleIndex, assign_pairs, walk_function
from engine.guard.vocab import (
    NN_NON_MODULE_CLASSES,
    TENSOR_GLUE_METHODS,
    TENSOR_NON_TENSOR_ATTRS,
    TENSOR_QUERY_METHODS,
    TENSOR_TENSOR_ATTRS,
    TORCH_NON_TENSOR_CALLS,
)

HotNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda

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


def is_nn_module_qualname(q: str | None) -> bool:
    """Whether ``q`` names a ``torch.nn`` layer class (not ``torch.nn.functional``, not a parameter)."""
    if not q or not q.startswith("torch.nn."):
        return False
    last = q.rsplit(".", 1)[-1]
    return (
        last[:1].isupper() and not q.startswith("torch.nn.functional.") and last not in NN_NON_MODULE_CLASSES
    )


class FnTypes:
    """What the names and expressions of one hot-path function are: tensors, layers held by the class,
    module values (containers, aliases, lambdas), tensor-identity keys, and which calls return tensors.

    ``fns`` is the hot path found so far (``HotPath.fns``, by ``id`` of the function node): a call of a
    hot-path helper returns a tensor when that helper's own inference said so.
    """

    def __init__(self, idx: ModuleIndex, fn: HotFn, fns: Mapping[int, HotFn]) -> None:
        self.idx, self.fn, self.fns = idx, fn, fns
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
                is_nn_module_qualname(self.idx.qualname(v.func)) for v in values if isinstance(v, ast.Call)
            )
        }

    def _is_init_tensor(self, value: ast.expr) -> bool:
        """Whether a value stored on `self` (outside the hot path) is a tensor or parameter."""
        if isinstance(value, ast.Call):
            q = self.idx.qualname(value.func) or ""
            if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"):
                return True
            if (
                q.startswith("torch.")
                and not is_nn_module_qualname(q)
                and not q.startswith(("torch.cuda", "torch.nn."))
            ):
                return q[6:] not in TORCH_NON_TENSOR_CALLS
            if isinstance(value.func, ast.Attribute) and value.func.attr in TENSOR_GLUE_METHODS:
                return self._is_init_tensor(value.func.value)
        return isinstance(value, ast.Attribute) and value.attr in _LAYER_TENSOR_ATTRS

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
        func = self.callee(call)
        if self.idx.ext_of(func, self.cls, self.local_ext):
            return True
        q = self.idx.qualname(func)
        if q:
            if q.startswith("torch.nn.functional.") or q.startswith("torch.ops."):
                return True
            if q.startswith("torch."):
                rest = q[6:]
                return not (rest in TORCH_NON_TENSOR_CALLS or rest.startswith(("cuda.", "backends.", "nn.")))
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
        fn = self.fns.get(id(node))
        return bool(fn and fn.returns_tensor)

    def _kind_functions(self, values: list[ast.expr]) -> list[HotNode]:
        out: list[HotNode] = []
        for v in values:
            if isinstance(v, ast.Lambda):
                out.append(v)
            elif isinstance(v, ast.Name) and v.id in self.idx.functions:
                out.append(self.idx.functions[v.id])
        return out

    def has_key_call(self, e: ast.AST) -> bool:
        for n in ast.walk(e):
            if isinstance(n, ast.Call):
                name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                if name in _KEY_CALLS:
                    return True
            if isinstance(n, ast.Name) and n.id in self.key_names:
                return True
        return False

    def callee(self, call: ast.Call) -> ast.expr:
        """The called expression, with `getattr(obj, "name")` read as `obj.name`."""
        func = call.func
        if isinstance(func, ast.Call) and self.idx.is_builtin(func.func, "getattr") and len(func.args) >= 2:
            name = func.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                return ast.copy_location(
                    ast.Attribute(value=func.args[0], attr=name.value, ctx=ast.Load()), func
                )
        return func

    def infer(self) -> bool:
        """Grow the tensor, key and module-value names to a fixpoint over the function's assignments and
        loops; True when this found that the function returns a tensor (which callers' passes need)."""
        for _ in range(6):
            before = (len(self.tensors), len(self.key_names), len(self.local_kinds))
            for node in walk_function(self.fn.node):
                for target, value in assign_pairs(node):
                    self._bind(target, value, self.is_tensor(value))
                    if isinstance(target, ast.Name) and self.has_key_call(value):
                        self.key_names.add(target.id)
                if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                    self._bind(node.target, node.iter, self.is_tensor(node.iter))
                    kinds = self.module_values(node.iter)
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
            return True
        return False

    def _bind(self, target: ast.AST, value: ast.AST, tensor: bool) -> None:
        if not tensor:
            return
        if isinstance(target, ast.Name):
            self.tensors.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._bind(elt.value if isinstance(elt, ast.Starred) else elt, value, tensor)

    def module_values(self, e: ast.AST) -> list[ast.expr]:
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
