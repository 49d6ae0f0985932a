"""The guard rules: stable ids, default severities and one-line meanings.

Rule ids are a contract: they appear in `eval.json`, in config files (to relax a rule) and in the
Judge's repair prompts, so an id is never renamed or reused. A rule refuses (the candidate is
rejected before it is built or timed) or warns (the candidate runs; the finding is shown to the
human and recorded). Every rule can be relaxed per run; a relaxed finding is still reported, with
``relaxed: true``, so a result always says which protections were off.

| rule id                        | severity | what it catches |
|--------------------------------|----------|-----------------|
| syntax-error                   | refuse   | the candidate does not parse, so nothing else can be checked |
| no-modelnew                    | refuse   | no top-level `class ModelNew` with a `forward` method |
| reference-model-used           | refuse   | the reference `Model` is instantiated, called, imported or inherited |
| torch-compute-in-forward       | refuse   | a PyTorch compute op (`torch.*`, a tensor method, numpy) on the hot path |
| functional-in-forward          | refuse   | a `torch.nn.functional` call on the hot path |
| submodule-compute-in-forward   | refuse   | a built-in `torch.nn` layer (`nn.Linear`, `nn.ReLU`, ...) called on the hot path |
| tensor-arithmetic-in-forward   | refuse   | an operator (`+ * @ < ...`) applied to a tensor on the hot path |
| kernel-not-called              | refuse   | the hot path never calls the compiled extension |
| kernel-call-unresolved         | warn     | no extension call was found, but the hot path calls something the checker cannot resolve |
| try-except-fallback            | refuse   | a `try`/`except` on the hot path (a silent fallback around the kernel) |
| try-except-elsewhere           | warn     | a `try`/`except` outside the hot path (e.g. around the build) |
| threads-or-processes           | refuse   | threads, processes, subprocesses or forks (Python or C++) |
| async-tricks                   | refuse   | `async`/`await`, asyncio, `torch.jit.fork`, futures, exit hooks, tracing hooks |
| tensor-subclass                | refuse   | tensor subclasses or dispatch modes (`__torch_function__`, `__torch_dispatch__`): lazy or fake outputs |
| runtime-tampering              | refuse   | frame/GC introspection, ctypes, `sys.modules`, builtins, `eval`/`exec`, dynamic `getattr`/`setattr` |
| foreign-compiler               | refuse   | `torch.compile`, TorchScript, dynamo/inductor, export or Triton instead of the extension |
| timing-patched                 | refuse   | `time.*` or `torch.cuda.Event` replaced, wrapped or subclassed |
| timing-access                  | warn     | the candidate reads clocks or creates CUDA events |
| sync-patched                   | refuse   | `synchronize`/`wait`/`query` of torch.cuda replaced |
| stream-swap                    | refuse   | Python-side stream games: `torch.cuda.Stream`, `torch.cuda.stream(...)`, `set_stream` |
| side-stream                    | refuse   | C++/CUDA-side stream creation or pool streams (`cudaStreamCreate`, `cuStreamCreate`, `getStreamFromPool`, ...), or a CUDA context of its own (`cuCtxCreate`) |
| monkeypatch-torch              | refuse   | any torch attribute assigned, deleted or `setattr`-ed (`torch.allclose = ...`, backends flags) |
| torch-global-state             | refuse   | calls that change global torch behaviour for the reference too (matmul precision, threads, dtype) |
| file-access                    | refuse   | reading or writing files (Python `open`, os/shutil/pathlib/pickle, `torch.save`/`load`; C++ `fopen`, fstreams) |
| network-access                 | refuse   | sockets, HTTP clients, `torch.hub`, `torch.distributed` (Python or C++) |
| output-cache                   | refuse   | results cached across calls: keys from `data_ptr()`/`id()`, dict caches on self or globals, memoised forward |
| state-in-forward               | warn     | the hot path assigns `self.<attr>` or declares `global` (state that survives a call) |
| native-static-state            | warn     | `static` tensors or containers in the C++/CUDA source (possible cross-call cache) |
| no-global-kernel               | refuse   | CUDA backend: no `__global__` kernel is defined in the candidate's sources |
| kernel-not-built               | refuse   | CUDA backend: no extension the hot path calls is built from sources with a `__global__` kernel |
| kernel-source-unresolved       | warn     | a build call's sources could not be resolved statically, so they were not fully checked |
| torch-compute-in-extension     | refuse   | ATen/torch compute called from the C++/CUDA source (`torch::matmul`, `at::native::...`, `.mm(`) |
| l2-persistence                 | refuse   | L2 persistence set up in the C++/CUDA source (an access-policy window, a persisting-L2 limit): data kept in L2 across the timing's cache flush |

The severities above are the ``strict`` policy's. Under the ``default`` policy (KernelBench's semantics,
``engine.guard.policy``) the five "PyTorch on the hot path" rules — torch-compute-in-forward,
functional-in-forward, submodule-compute-in-forward, tensor-arithmetic-in-forward and
torch-compute-in-extension — warn instead, and the runtime rules ``own-kernel-unneeded`` (split builds:
the output still passes with the own kernels' launches switched off) and ``own-kernel-trivial`` (other
builds: the own kernels do no measurable work; ``engine.guard.runtime``) refuse a candidate whose own
kernels the result does not need. ``l2-persistence`` and its runtime twin ``l2-persisting`` (the worker
found the persisting-L2 limit changed after a candidate call) warn under ``default`` and refuse under
``strict``: KernelBench's own timing does nothing about L2 persistence, and cudaforge's puts the limit
back and resets the persisting lines before every timed call's flush (engine.eval.l2), so the figure
stays honest either way.

The runtime rules (``RUNTIME_RULES`` below) are checked by the worker while the candidate runs; their
table, with what each catches, is in ``engine.guard.runtime``.

"Hot path" means `ModelNew.forward` and everything it calls within the file, transitively
(methods via `self.m(...)`, module functions, in-file `nn.Module`s and `autograd.Function`s,
lambdas stored on `self`). Module-level code and `__init__` may use torch freely to build weights.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Severity = Literal["refuse", "warn"]


@dataclass(frozen=True)
class Rule:
    """One guard rule: its id, its default severity and what it is for (shown to humans and the Judge)."""

    id: str
    severity: Severity
    summary: str


def _parse_table(doc: str) -> dict[str, Rule]:
    """Read the rule table above, so the documentation and the code cannot drift apart."""
    rules: dict[str, Rule] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[1] not in ("refuse", "warn"):
            continue
        rules[cells[0]] = Rule(cells[0], cells[1], cells[2])  # type: ignore[arg-type]
    return rules


RULES: dict[str, Rule] = _parse_table(__doc__ or "")
#: runtime rule id -> severity (``engine.guard.runtime`` checks them in the worker; its docstring has the table)
RUNTIME_RULES: dict[str, str] = {
    "input-mutated": "refuse",
    "output-aliases-input": "refuse",
    "output-cached": "refuse",
    "output-not-tensor": "refuse",
    "no-own-kernel": "refuse",
    "timing-disagreement": "refuse",
    "kernel-launch-unverified": "warn",
    "own-kernel-trivial": "refuse",
    "own-kernel-unneeded": "refuse",
    "output-degenerate": "refuse",
    "precision-changed": "refuse",
    "shape-specific": "warn",
    "extension-load-failed": "refuse",
    "output-replayed": "refuse",
    "l2-persisting": "warn",
}

# Guard policies (ARCHITECTURE.md §3, "Guard policy"): ``default`` follows KernelBench, ``strict`` demands
# full replacement. The names live here, with the rule ids, so the config validates both without loading
# the guard itself (this module imports nothing of cudaforge's).
GuardPolicy = Literal["default", "strict"]
POLICIES: tuple[str, ...] = get_args(GuardPolicy)
DEFAULT_POLICY: GuardPolicy = "default"

# The rules that judge syntax ("PyTorch does this work"), not evidence; warnings under ``default``.
PARTIAL_REPLACEMENT_RULES: frozenset[str] = frozenset(
    {
        "torch-compute-in-forward",
        "functional-in-forward",
        "submodule-compute-in-forward",
        "tensor-arithmetic-in-forward",
        "torch-compute-in-extension",
    }
)

# What KernelBench's own harness leaves alone and cudaforge neutralises at run time: warnings under
# ``default``, refusals under ``strict`` (the static rule and its runtime twin).
KERNELBENCH_LEVEL_RULES: frozenset[str] = frozenset({"l2-persistence", "l2-persisting"})

# Static findings that are not cheats but a candidate that does not load: the build stage reports them
# as a compile_error with the real error (what the Judge's repair mode needs), and ``cudaforge check``
# says the kernel would not build.
LEFT_TO_BUILD: frozenset[str] = frozenset({"syntax-error", "no-modelnew"})


class GuardPolicyError(ValueError):
    """An unknown policy or rule id (a typo must not silently change what is enforced)."""


def all_rule_ids() -> dict[str, str]:
    """Every rule id (static and runtime) with its table severity."""
    return {**{rid: rule.severity for rid, rule in RULES.items()}, **RUNTIME_RULES}


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise GuardPolicyError(f"unknown guard policy {policy!r}; valid policies: {', '.join(POLICIES)}")
    return policy


def check_rule_ids(ids: Iterable[str], what: str = "guard rule") -> list[str]:
    """The ids in order, without duplicates; an unknown one raises, naming every valid id."""
    known = all_rule_ids()
    out: list[str] = []
    for rid in ids:
        if rid not in known:
            raise GuardPolicyError(f"unknown {what} id {rid!r}; valid rule ids: {', '.join(sorted(known))}")
        if rid not in out:
            out.append(rid)
    return out


def validate_relax(relax: Iterable[str]) -> frozenset[str]:
    """Return the relaxed rule ids, refusing unknown ones: a typo in config must not silently keep a guard on
    (or make the user believe one is off)."""
    ids = frozenset(relax)
    unknown = sorted(ids - RULES.keys())
    if unknown:
        raise ValueError(f"unknown guard rule id(s): {', '.join(unknown)}; known: {', '.join(sorted(RULES))}")
    return ids
