"""The ``EvalResult``: what one evaluation of a candidate kernel found (ARCHITECTURE.md §3, a contract).

It is written to ``eval.json`` in every session commit and printed by ``cudaforge eval --json``,
so other tools read it: keep field names stable and only add fields. ``from_dict`` ignores keys
it does not know, so results written by a newer cudaforge still load.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1

CORRECT = "correct"
INCORRECT = "incorrect"
COMPILE_ERROR = "compile_error"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
REJECTED = "rejected"
# The verdicts on a candidate: what sessions commit and summaries count (the contract, ARCHITECTURE.md §3).
STATUSES = (CORRECT, INCORRECT, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT, REJECTED)
# Not a verdict: cudaforge itself failed (engine.eval.faults). Never committed, never sent to the Judge,
# rerun by batch commands; ``harness_fault`` says what failed.
HARNESS_ERROR = "harness_error"
OUTCOMES = (*STATUSES, HARNESS_ERROR)

# Stages in the order the worker runs them; ``stage`` in a result is the last one reached.
# "reference": the task's own Model run on its own inputs before any candidate code (a task check); cut
# short by a compile error in the candidate's own code, it is run again after the import under "check".
# A gated worker (an exploration's check: engine.eval.pipe) builds first, then waits in "gpu_wait"
# for its GPU, then runs "reference", "build" (the import, finding its build done) and the rest.
STAGES = ("start", "guard", "reference", "build", "check", "time", "ablation", "shapes", "done")
# Stages after the evidence for a verdict is in: a crash there keeps the verdict so far.
LATE_STAGES = ("ablation", "shapes")

# Which side a failing result blames (``failed_side``): the task's reference or the candidate kernel.
REFERENCE_SIDE = "reference"
CANDIDATE_SIDE = "candidate"
HARNESS_SIDE = "harness"  # cudaforge's own fault (status ``harness_error``)


@dataclass
class TimingStats:
    """Per-call times of one model, in milliseconds, over ``n`` timed calls."""

    n: int
    median_ms: float
    p25_ms: float
    p75_ms: float
    iqr_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    std_ms: float
    # Medians over the timed calls (engine.eval.timing): the host clock's span of flush, call and
    # device-wide sync; the flush's own span by events; and the gap, host time less the call's events and
    # the reference's median flush, where work hidden from the events shows. None on CPU (one clock) and in
    # older records.
    host_median_ms: float | None = None
    flush_median_ms: float | None = None
    gap_median_ms: float | None = None
    #: the 95% bootstrap interval of ``median_ms`` (engine.eval.bootstrap); None in older records
    median_interval_ms: list[float] | None = None

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> TimingStats:
        """Summarise raw samples (at least one) with robust statistics."""
        from engine.eval.bootstrap import median_interval

        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        n = len(ordered)
        mean = sum(ordered) / n
        var = sum((x - mean) ** 2 for x in ordered) / (n - 1) if n > 1 else 0.0
        p25, p50, p75 = (_quantile(ordered, q) for q in (0.25, 0.5, 0.75))
        return cls(
            n=n,
            median_ms=p50,
            p25_ms=p25,
            p75_ms=p75,
            iqr_ms=p75 - p25,
            min_ms=ordered[0],
            max_ms=ordered[-1],
            mean_ms=mean,
            std_ms=var**0.5,
            median_interval_ms=list(median_interval(ordered)),
        )


def _quantile(ordered: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list."""
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Timing:
    """Candidate and reference timed in the same worker, the same way."""

    method: str  # "cuda-events" or "cpu-perf-counter"
    candidate: TimingStats
    reference: TimingStats
    l2_flush_bytes: int = 0
    warmup_calls: int = 0
    #: the 95% bootstrap interval of the speedup (reference median / candidate median); None in older records
    speedup_interval: list[float] | None = None


@dataclass
class TrialResult:
    """One correctness trial: fresh seeded inputs, every output compared."""

    index: int
    seed: int
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    message: str = ""


@dataclass
class ExtensionBuild:
    """One ``load_inline`` call made by the candidate while it was imported."""

    name: str
    build_dir: str
    cached: bool
    seconds: float
    path: str  # "fast" (torch-free CUDA source), "stock" (torch headers in the .cu), "split" (a stock source rewritten by engine.eval.build.split.rewrite) or "cpp" (no CUDA)
    ok: bool = True
    pch: str = ""  # "used": the binding compiled against cudaforge's precompiled torch header; "queued": one is being made
    split_skipped: str | None = None  # why a stock-layout source was built the stock way instead of split
    # Each translation unit of this build, then the link (engine.eval.build.objects): {"unit", "rule",
    # "reused": the object came from an earlier build, "seconds": its compile (None when reused or not
    # run), "not_cached": why it may not be reused (absent when it may)}. Empty when ninja had nothing to do.
    units: list[dict[str, Any]] = field(default_factory=list)
    # Built by the worker's prebuild thread while the reference was checked (engine.eval.build.prebuild):
    # ``seconds`` is that build's; the import then found it done.
    prebuilt: bool = False
    # A split build's C++ unit names each piece of cuda_sources apart (engine.eval.build.split.rewrite):
    # "TAG.K" -> the candidate's line where piece K starts. The log and messages are shown with the
    # candidate's own lines already.
    host_lines: dict[str, int] = field(default_factory=dict)
    # sha256 of the built library, read by the evaluating process after the worker ended, never taken
    # from the worker (engine.eval.build.trust): what lets a later reference load these very bytes
    digest: str | None = None


@dataclass
class BuildInfo:
    """The build stage: importing the candidate, which runs its extension builds."""

    seconds: float | None = None
    log: str = ""
    extensions: list[ExtensionBuild] = field(default_factory=list)
    #: what the task's own import built through the cache (engine.eval.build.reference): a re-timing's
    #: best kernel, loaded only as the bytes its evaluation recorded; never the candidate's
    reference_extensions: list[ExtensionBuild] = field(default_factory=list)
    #: why a reference library on record was built in a folder of its own instead (changed since, ...)
    reference_notes: list[str] = field(default_factory=list)

    @property
    def cached(self) -> bool | None:
        """True when every extension came from the build cache; None when nothing was built."""
        if not self.extensions:
            return None
        return all(ext.cached for ext in self.extensions)


@dataclass
class EvalResult:
    """Everything one evaluation found; ``status`` is the verdict (see ``STATUSES``)."""

    status: str
    stage: str = "start"
    device: str = "cpu"
    task: str = ""
    kernel_sha256: str = ""
    messages: list[str] = field(default_factory=list)
    build: BuildInfo = field(default_factory=BuildInfo)
    trials: list[TrialResult] = field(default_factory=list)
    timing: Timing | None = None
    speedup: float | None = None
    flags: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    relaxed_rules: list[str] = field(default_factory=list)
    guard_policy: str = "default"  # "default" (KernelBench: PyTorch ops warn) or "strict" (full replacement)
    guard_refuse: list[str] = field(default_factory=list)  # rules turned from warnings into refusals
    # The candidate's own kernels' share of its forward's device time (engine.guard.share):
    # {"share", "own_ms", "library_ms", "method", "kernels": [{"name", "own", "ms", "calls"}]}, or None.
    kernel_share: dict[str, Any] | None = None
    # torch.compile of the reference per mode, timed beside eager in its own process (engine.eval.baselines);
    # empty unless asked for. ``speedup`` stays against eager.
    baselines: dict[str, Any] = field(default_factory=dict)
    error: dict[str, str] | None = None  # {"type", "message", "traceback"} of a Python exception
    signal: str | None = None  # e.g. "SIGSEGV" when the worker died of a signal
    exit_code: int | None = None
    stderr_tail: str = ""
    durations: dict[str, float] = field(default_factory=dict)  # seconds per stage, plus "total"
    settings: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    sandbox: str = ""  # what confined the candidate: "bwrap", "landlock" or "off" (engine.sandbox)
    schema: int = SCHEMA_VERSION
    # Added with the reference check: which side failed ("reference" | "candidate"; None when correct),
    # and True when the task itself is broken (its reference fails on its own inputs): no kernel is at fault.
    failed_side: str | None = None
    task_error: bool = False
    # Added with harness faults (engine.eval.faults): {"kind", "message", ...} when status is harness_error.
    harness_fault: dict[str, Any] | None = None
    # The worker's GPU memory, measured: {"peak_allocated_bytes", "peak_reserved_bytes"} from torch's
    # allocator over the whole evaluation (CUDA only), plus {"at_oom": {...}} when it ran out.
    memory: dict[str, Any] | None = None
    # Added with the adversarial defences (issue 25; ARCHITECTURE.md §3, "Defences"):
    # the task's outputs a degenerate answer would pass: [{"output", "passes": ["zeros", ...], "resolvable"}]
    weak_outputs: list[dict[str, Any]] = field(default_factory=list)
    # correctness re-checked at perturbed sizes (engine.eval.shapes):
    # {"sizes": {name: n}, "variants": [{"name", "sizes", "status", "message"}], "note", "crashed"}
    shapes: dict[str, Any] | None = None
    # Added with the hardware floor (engine.eval.floor, engine.eval.plausibility): the task's lower bounds
    # measured in the worker after timing {"input_bytes", "output_bytes", "param_bytes", "flops", "dtype",
    # "dtypes", "note", "seconds"}; on CUDA the parent adds the floor {"gpu", "bytes_min", "bandwidth_gbs",
    # "bytes_ms", "peak", "peak_tflops", "flops_ms", "floor_ms", "bound", "kernel_ms", "margin",
    # "implausible": True | False | None (not judged: "unjudged" says why)}. None when not timed.
    hardware_floor: dict[str, Any] | None = None
    # Added with the float64 arbiter (engine.eval.arbiter; ARCHITECTURE.md §3, "Defences"): None unless a
    # weak output's check would have failed the candidate; then {"outputs": [{"output", "accepted",
    # "constant", "candidate_error", "reference_error", "allowed"}], "constant_to_rounding": True when
    # the exact answer is constant to rounding and the candidate was accepted there (any output within
    # rounding passes: a speedup is no evidence, and a review flag says so), "unavailable": why the
    # float64 run could not judge (the spread rule decided alone), or None}.
    arbiter: dict[str, Any] | None = None
    #: the kernel was iteration N's again (engine.loop.duplicates): not built or timed, N's result kept
    same_as: int | None = None

    @property
    def ok(self) -> bool:
        """True only for a correct kernel."""
        return self.status == CORRECT

    @property
    def harness_failed(self) -> bool:
        """True when cudaforge, not the candidate or the task, failed: no verdict on the kernel."""
        return self.status == HARNESS_ERROR

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the contract's shape), with the derived ``build.cached`` included."""
        data = dataclasses.asdict(self)
        data["build"]["cached"] = self.build.cached
        return data

    def to_json(self, indent: int | None = 2) -> str:
        """Serialise for ``eval.json`` and ``--json``."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        """Rebuild from ``to_dict`` output, ignoring unknown keys (forward compatible)."""
        data = dict(data)
        # results older than guard policies were judged by today's strict rules
        data.setdefault("guard_policy", "strict")
        build = dict(data.get("build") or {})
        build.pop("cached", None)
        extensions = [ExtensionBuild(**_known(ExtensionBuild, e)) for e in build.pop("extensions", [])]
        references = [ExtensionBuild(**_known(ExtensionBuild, e)) for e in build.pop("reference_extensions", [])]
        data["build"] = BuildInfo(**_known(BuildInfo, build), extensions=extensions, reference_extensions=references)
        data["trials"] = [TrialResult(**_known(TrialResult, t)) for t in data.get("trials") or []]
        timing = data.get("timing")
        if timing:
            data["timing"] = Timing(
                **{
                    **_known(Timing, timing),
                    "candidate": TimingStats(**_known(TimingStats, timing["candidate"])),
                    "reference": TimingStats(**_known(TimingStats, timing["reference"])),
                }
            )
        return cls(**_known(cls, data))

    @classmethod
    def from_json(cls, text: str) -> EvalResult:
        """Parse an ``eval.json`` document."""
        return cls.from_dict(json.loads(text))


def _known(klass: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(klass)}
    return {k: v for k, v in data.items() if k in names}


def error_info(error: BaseException) -> dict[str, str]:
    """An exception as a result records it (``EvalResult.error``): type, message, the traceback's end."""
    import traceback

    return {
        "type": type(error).__name__,
        "message": str(error)[:4000],
        "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:],
    }
