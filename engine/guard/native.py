"""Scan the C++/CUDA source strings of a candidate.

The Python AST cannot see inside the strings handed to `load_inline`, yet that is where a kernel can
launch on its own stream, call ATen instead of doing the work, spawn threads or keep a static cache.
Comments and string literals are blanked first (keeping every newline, so offsets still map to
lines), so a cheat cannot hide a `__global__` in a comment and a comment cannot cause a refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.guard.vocab import NATIVE_COMPUTE_METHODS, NATIVE_NS_ALLOWED

_GLOBAL_KERNEL = re.compile(r"\b__global__\b[^;{}]*?\b\w+\s*\(")

# (rule, pattern, message); patterns run on comment- and literal-free text.
_NATIVE_PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    ("side-stream", re.compile(r"\bcudaStreamCreate\w*\b"), "creates its own CUDA stream ({m})"),
    ("side-stream", re.compile(r"\bgetStreamFromPool\b"), "takes a stream from the pool ({m})"),
    ("side-stream", re.compile(r"\bcudaStreamNonBlocking\b"), "uses a non-blocking stream ({m})"),
    ("side-stream", re.compile(r"\bcudaStreamPerThread\b"), "launches on the per-thread stream ({m})"),
    ("side-stream", re.compile(r"\bset(?:Current)?CUDAStream\b"), "swaps the current CUDA stream ({m})"),
    ("side-stream", re.compile(r"\bcuStreamCreate\w*\b"), "creates its own CUDA stream through the driver ({m})"),
    (
        "side-stream",
        re.compile(r"\bcu(?:Ctx|GreenCtx)Create\w*\b|\bcuGreenCtxStreamCreate\b"),
        "creates a CUDA context of its own ({m}): the timing's device-wide sync does not wait for its work",
    ),
    (
        "threads-or-processes",
        re.compile(r"\bstd::(?:j?thread|async)\b|\bpthread_create\b|\bfork\s*\("),
        "starts threads or processes in native code ({m}); use at::parallel_for or OpenMP",
    ),
    ("file-access", re.compile(r"\bfopen\s*\(|\bstd::[io]?fstream\b|\bfreopen\s*\("), "touches files ({m})"),
    (
        "network-access",
        re.compile(r"\bsocket\s*\(|\bcurl_\w+\s*\(|\bconnect\s*\("),
        "opens network connections ({m})",
    ),
    (
        "torch-global-state",
        re.compile(
            r"\bset(?:AllowTF32CuBLAS|AllowTF32CuDNN|Float32MatmulPrecision|Float32Precision"
            r"|AllowFP16ReductionCuBLAS|AllowBF16ReductionCuBLAS|AllowFP16AccumulationCuBLAS"
            r"|BenchmarkCuDNN|DeterministicCuDNN|DeterministicAlgorithms)\b|\bcublasSetMathMode\b"
        ),
        "changes a numeric mode for every library call, the reference's too ({m}); "
        "the worker pins these flags and refuses a change (precision-changed)",
    ),
    (
        "runtime-tampering",
        re.compile(r"\bcf_(?:launch_|ablate|ablated\b)\w*"),
        "names cudaforge's generated launch code ({m}), which decides whether the own kernels are needed",
    ),
    (
        "l2-persistence",
        re.compile(
            r"\b(?:cudaStreamAttributeAccessPolicyWindow|cudaLaunchAttributeAccessPolicyWindow"
            r"|CU_(?:STREAM|LAUNCH)_ATTRIBUTE_ACCESS_POLICY_WINDOW|cudaLimitPersistingL2CacheSize"
            r"|CU_LIMIT_PERSISTING_L2_CACHE_SIZE|cudaAccessPropertyPersisting|CU_ACCESS_PROPERTY_PERSISTING"
            r"|accessPolicyWindow|cudaAccessPolicyWindow|CUaccessPolicyWindow)\b"
        ),
        "sets up L2 persistence ({m}): data kept in L2 survives the timing's cache flush; cudaforge resets "
        "persisting lines before every timed call",
    ),
    (
        "native-static-state",
        re.compile(
            r"\bstatic\s+(?:const\s+)?(?:(?:torch|at)::Tensor\b|std::(?:unordered_)?map\b|std::vector\b)"
        ),
        "keeps static state across calls ({m}); results must not be cached between calls",
    ),
]

_NS_CALL = re.compile(r"\b(?:torch|at)::((?:\w+::)*)(\w+)\s*(?:<[^<>;]*>)?\s*[({]")
# A name matches only where "(" follows it, so the order of the alternatives does not matter.
_METHOD_CALL = re.compile(r"(?:\.|->)(" + "|".join(sorted(NATIVE_COMPUTE_METHODS)) + r")\s*\(")


@dataclass(frozen=True)
class NativeHit:
    """One match in a native source: rule, 0-based character offset and message."""

    rule: str
    offset: int
    message: str


def blank_comments_and_literals(code: str) -> str:
    """Replace C/C++ comments and string/char literal contents with spaces, keeping newlines and length."""
    out = list(code)
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            end = code.find("\n", i)
            start, end = i, (n if end < 0 else end)
            resume = end
        elif code.startswith("/*", i):
            end = code.find("*/", i + 2)
            start, end = i, (n if end < 0 else end + 2)
            resume = end
        elif c in "\"'":
            end = i + 1
            while end < n and code[end] != c and code[end] != "\n":
                end += 2 if code[end] == "\\" else 1
            start, end = i + 1, min(end, n)  # blank the contents only; the quotes keep tokens apart
            resume = end + 1
        else:
            i += 1
            continue
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "
        i = resume
    return "".join(out)


def defines_global_kernel(code: str) -> bool:
    """True when the source defines (or declares) a `__global__` function outside comments."""
    return bool(_GLOBAL_KERNEL.search(blank_comments_and_literals(code)))


def scan_native(code: str) -> list[NativeHit]:
    """All native-side findings in one C++/CUDA source string."""
    clean = blank_comments_and_literals(code)
    hits: list[NativeHit] = []
    for rule, pattern, message in _NATIVE_PATTERNS:
        for m in pattern.finditer(clean):
            hits.append(NativeHit(rule, m.start(), message.format(m=m.group(0).strip())))
    for m in _NS_CALL.finditer(clean):
        prefix, name = m.group(1), m.group(2)
        if prefix.startswith("cuda::") or name in NATIVE_NS_ALLOWED or name.startswith(("is", "check", "k")):
            continue
        if prefix and not prefix.startswith(
            ("native::", "nn::", "_ops::", "cpu::", "linalg::", "special::", "fft::")
        ):
            continue  # a nested namespace we do not know (c10-style helpers): do not guess
        hits.append(
            NativeHit(
                "torch-compute-in-extension",
                m.start(),
                f"calls ATen compute `{m.group(0).rstrip('({ ')}` from the extension; "
                "only allocation (torch::empty*, zeros*) is allowed there",
            )
        )
    for m in _METHOD_CALL.finditer(clean):
        hits.append(
            NativeHit(
                "torch-compute-in-extension",
                m.start(),
                f"calls the tensor method `.{m.group(1)}()` (ATen compute) from the extension",
            )
        )
    return hits
