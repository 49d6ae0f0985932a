"""Checks that apply to the whole candidate file, not only the hot path.

Threads, processes, network and file access, patching of timing, synchronisation or torch itself,
stream swaps, tensor subclasses and reaching into the interpreter are cheats wherever they happen:
module-level code and `__init__` run in the evaluator's process before timing starts.
"""

from __future__ import annotations

import ast

from engine.guard.pyindex import ModuleIndex
from engine.guard.vocab import CALL_RULES, IMPORT_RULES, SUBCLASS_ATTRS, TAMPER_ATTRS, TAMPER_QUALNAMES

RawFinding = tuple[str, int, str]

# Order matters where prefixes overlap (torch.jit.fork is async-tricks before foreign-compiler).
_CALL_RULE_ORDER = (
    "runtime-tampering",
    "async-tricks",
    "file-access",
    "threads-or-processes",
    "network-access",
    "stream-swap",
    "timing-access",
    "torch-global-state",
    "foreign-compiler",
)
_TENSOR_BASES = ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch._tensor.Tensor")
_HOOK_REGISTRATIONS = frozenset(
    {
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_module_forward_hook",
        "register_module_forward_pre_hook",
        "register_module_call_hook",
        "register_torch_function_mode",
    }
)
_MODE_BASES = ("TorchDispatchMode", "TorchFunctionMode", "BaseTorchFunctionMode")


def _matches(q: str, patterns: tuple[str, ...] | frozenset[str]) -> bool:
    return any(q == p or (p.endswith(".") and q.startswith(p)) for p in patterns)


def _module_matches(module: str, roots: frozenset[str]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def classify_patch(q: str) -> tuple[str, str] | None:
    """Which rule an assignment to (or deletion of) the attribute `q` breaks, if any."""
    root = q.split(".")[0]
    if root in ("time", "timeit"):
        return "timing-patched", f"replaces `{q}`: the evaluator's clock must not be touched"
    if root == "builtins":
        return "runtime-tampering", f"replaces the builtin `{q}`"
    if root != "torch":
        return None
    if "synchronize" in q or q.endswith((".wait", ".query")):
        return "sync-patched", f"replaces `{q}`: synchronisation must stay real"
    if "Event" in q or "elapsed_time" in q or q.endswith(".record"):
        return "timing-patched", f"replaces `{q}`: CUDA-event timing must stay real"
    if "stream" in q.lower():
        return "stream-swap", f"replaces `{q}`: the current stream must not be swapped"
    return "monkeypatch-torch", f"assigns `{q}`: patching torch changes the reference and the checks too"


class WholeFileScan:
    """One walk over the module, collecting file-wide findings."""

    def __init__(self, index: ModuleIndex, hot_nodes: set[int]) -> None:
        self.idx = index
        self.hot_nodes = hot_nodes
        self.findings: list[RawFinding] = []

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.findings.append((rule, getattr(node, "lineno", 1), message))

    def run(self) -> list[RawFinding]:
        for node in ast.walk(self.idx.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.check_import(node)
            elif isinstance(node, ast.Call):
                self.check_call(node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                self.check_store(node)
            elif isinstance(node, ast.ClassDef):
                self.check_class(node)
            elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
                self.flag("async-tricks", node, "async code: work could finish after the timer stops")
            elif isinstance(node, ast.Attribute):
                self.check_attribute(node)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id == "Model":
                self.flag(
                    "reference-model-used", node, "uses the reference `Model`: the candidate must not run it"
                )
            elif (
                isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try)))
                and node.handlers
                and not self._in_hot_path(node)
            ):
                self.flag(
                    "try-except-elsewhere",
                    node,
                    "`try`/`except` outside the hot path (check it is no fallback)",
                )
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (
                "__torch_function__",
                "__torch_dispatch__",
            ):
                self.flag(
                    "tensor-subclass", node, f"defines `{node.name}`: tensors must be real, not lazy or fake"
                )
        return self.findings

    def _in_hot_path(self, node: ast.AST) -> bool:
        cur = self.idx.parents.get(id(node))
        while cur is not None:
            if id(cur) in self.hot_nodes:
                return True
            cur = self.idx.parents.get(id(cur))
        return False

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            base = node.module or ""
            modules = [base] + [f"{base}.{a.name}" for a in node.names] if node.level == 0 else []
            if any(a.name == "Model" for a in node.names):
                self.flag("reference-model-used", node, "imports the reference `Model`")
        for rule, roots in IMPORT_RULES.items():
            hit = next((m for m in modules if _module_matches(m, roots)), None)
            if hit:
                message = "imports `time`/`timeit`" if rule == "timing-access" else f"imports `{hit}`"
                self.flag(rule, node, message)

    def check_call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in _HOOK_REGISTRATIONS:
            self.flag("runtime-tampering", node, f"`{node.func.attr}` runs hidden code around forward")
            return
        q = self.idx.qualname(node.func)
        if q in ("builtins.setattr", "builtins.delattr") and node.args:
            self.check_setattr(node)
            return
        if q == "builtins.getattr" and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
            if self.idx.qualname(node.args[0]):
                self.flag("runtime-tampering", node, "looks up a module attribute by a computed name")
            return
        if not q:
            return
        for rule in _CALL_RULE_ORDER:
            if _matches(q, CALL_RULES[rule]):
                self.flag(rule, node, f"calls `{q}`")
                return

    def check_setattr(self, node: ast.Call) -> None:
        target = self.idx.qualname(node.args[0])
        if target is None:
            return  # setattr on self or another local object: ordinary Python
        name = node.args[1] if len(node.args) > 1 else None
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            verdict = classify_patch(f"{target}.{name.value}")
            if verdict:
                self.flag(verdict[0], node, verdict[1])
        else:
            self.flag("runtime-tampering", node, f"sets an attribute of `{target}` by a computed name")

    def check_store(self, node: ast.AST) -> None:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]  # type: ignore[attr-defined]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    if sub.attr == "__class__":
                        self.flag(
                            "tensor-subclass", node, "reassigns `__class__`: objects must stay what they are"
                        )
                        continue
                    q = self.idx.qualname(sub)
                    verdict = classify_patch(q) if q else None
                    if verdict:
                        self.flag(verdict[0], node, verdict[1])

    def check_class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            q = self.idx.qualname(base) or ""
            if q in _TENSOR_BASES or q.endswith(_MODE_BASES):
                self.flag(
                    "tensor-subclass", node, f"`{node.name}` subclasses `{q}`: outputs must be real tensors"
                )
            elif q.startswith("torch.cuda.") and "Event" in q:
                self.flag("timing-patched", node, f"`{node.name}` subclasses `{q}`")
            elif q.startswith("threading."):
                self.flag("threads-or-processes", node, f"`{node.name}` subclasses `{q}`")

    def check_attribute(self, node: ast.Attribute) -> None:
        if node.attr in SUBCLASS_ATTRS:
            self.flag("tensor-subclass", node, f"uses `{node.attr}`: outputs must be real tensors")
        elif node.attr in TAMPER_ATTRS:
            self.flag("runtime-tampering", node, f"reaches into interpreter internals (`{node.attr}`)")
        else:
            q = self.idx.qualname(node)
            if not q:
                return
            if (
                _matches(q, TAMPER_QUALNAMES)
                or any(q.startswith(p + ".") for p in TAMPER_QUALNAMES)
                or node.attr == "__dict__"
            ):
                self.flag("runtime-tampering", node, f"reaches into `{q}`")
            elif node.attr == "Model" and isinstance(node.ctx, ast.Load):
                self.flag("reference-model-used", node, f"uses the reference `{q}`")
