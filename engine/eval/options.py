"""What one evaluation is asked to do, what it reports while it runs, and how it refuses to start.

These are the evaluator's API types (ARCHITECTURE.md §3): every front end builds an :class:`EvalOptions`
(from its config with :meth:`EvalOptions.from_config`), receives :class:`EvalEvent` progress, and gets an
:class:`EvaluationError` when the evaluation cannot start at all. They import nothing heavy, so a front
end can build options without loading torch.

Two values are settled once, by the front end, and then travel as they are (ARCHITECTURE.md §3, "One
device, one guard"): the device (:func:`resolve_device` turns the user's ``auto``/``cpu``/``cuda`` into
``cpu`` or ``cuda``; :class:`EvalOptions` holds only that answer) and the guard settings (one
:class:`~engine.guard.policy.GuardSettings`, validated when made, carried in ``EvalOptions.guard`` down to
the worker's job). Nothing below the front end asks again.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from engine.config import EvalConfig, TimeoutsConfig
from engine.eval.timing import TimingPlan
from engine.eval.tolerances import DEFAULT_TOLERANCES
from engine.guard.policy import GuardSettings


@dataclass
class StageTimeouts:
    """Seconds each stage may take before the worker's process group is killed (defaults: the config's)."""

    start: float = TimeoutsConfig.start  # interpreter + torch import
    setup: float = TimeoutsConfig.setup  # environment facts + importing the task
    build: float = TimeoutsConfig.build  # a cold stock CUDA build takes about a minute; template-heavy ones more
    check: float = TimeoutsConfig.check
    time: float = TimeoutsConfig.time


RESOLVED_DEVICES = ("cpu", "cuda")


@dataclass
class EvalOptions:
    """Settings of one evaluation; defaults follow the evaluation protocol (ARCHITECTURE.md §3)."""

    # where kernels run, resolved already (resolve_device): cpu or cuda, never auto. The default runs
    # anywhere; a caller that wants the GPU says so, as every front end does once it has resolved --device.
    device: str = "cpu"
    trials: int = EvalConfig.trials
    seed: int = EvalConfig.seed
    tolerances: dict[str, float] = field(default_factory=dict)
    timing: TimingPlan = field(default_factory=TimingPlan)
    do_timing: bool = True
    timeouts: StageTimeouts = field(default_factory=StageTimeouts)
    cache_root: Path | None = None
    # cudaforge's precompiled torch header for the C++ binding (engine.eval.build.pch): ``use_pch`` builds
    # with a header already made for the flag set, ``make_pch`` makes a missing one in the background
    # (~50 s of g++ on a core). CUDAFORGE_PCH=0 turns both off, CUDAFORGE_PCH=use only uses headers made
    # already: for a box whose cores are better spent elsewhere (the test suite: most of its tests build
    # once in a fresh cache, where a header would never be used; its shared cache has them made once).
    use_pch: bool = field(default_factory=lambda: os.environ.get("CUDAFORGE_PCH", "1") != "0")
    make_pch: bool = field(default_factory=lambda: os.environ.get("CUDAFORGE_PCH", "1") not in ("0", "use"))
    gpu_index: int | None = None
    guards: bool = True  # off only to measure their cost; relax single rules with ``relax`` instead
    # the static guard of the candidate's source; off only where cudaforge wrote the candidate around
    # sources it guarded one by one (``cudaforge apply``'s whole-model check); the runtime guards still run
    static_guard: bool = True
    # the run's guard policy and per-rule relax/refuse lists, validated when made and never rebuilt: the
    # static guard reads it, the supervisor writes its runtime half into the worker's job, the result records it
    guard: GuardSettings = field(default_factory=GuardSettings)
    flag_speedup_above: float = 10.0  # a larger speedup is flagged for human review
    # a kernel timed below this fraction of the hardware floor is flagged too (engine.eval.plausibility)
    flag_below_floor: float = 0.9
    # PyTorch's CPU reference runs on one thread by default: its thread pool slows by up to ~80x when
    # other work takes the cores (seen on the 2-core CI machine), which would fake a large speedup.
    cpu_threads: int = 1
    sandbox: str = EvalConfig.sandbox  # auto | bwrap | landlock | off: what confines the worker (engine.sandbox)
    workers: str = EvalConfig.workers  # auto | fork | exec: how a worker starts (engine.eval.forkserver)
    shapes: bool = EvalConfig.shapes  # re-check correctness at perturbed sizes (engine.eval.shapes)
    # torch.compile modes timed beside eager for a correct kernel (engine.eval.baselines); none by default
    compile_baselines: tuple[str, ...] = ()
    # build the extensions the candidate's source names while the reference is checked
    # (engine.eval.build.prebuild); CUDAFORGE_PREBUILD=0 turns it off (benchmarks compare both)
    prebuild: bool = field(default_factory=lambda: os.environ.get("CUDAFORGE_PREBUILD", "1") != "0")
    # every build of one evaluation together (engine.eval.build.failures): once spent, compile_error
    build_budget_s: float = EvalConfig.build_budget_s
    # the whole evaluation's wall-clock cap, every stage together (evalset's --max-pair-seconds); None: the
    # stage limits alone. Past it the worker is killed and the verdict is a timeout that names the cap.
    max_seconds: float | None = None
    # {library path: sha256} of libraries an earlier evaluation ran, sealed by its evaluating process: the
    # task's import may load exactly these from the build cache (the loop's re-timing; engine.eval.build.reference)
    trusted_libraries: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """An unresolved device (``auto``) or a guard that is not a :class:`GuardSettings` is the caller's
        mistake: said here, where it was made, not as a worker failing on ``torch.device("auto")``."""
        if self.device not in RESOLVED_DEVICES:
            raise EvaluationError(
                f"EvalOptions.device is {self.device!r}: give a resolved device, cpu or cuda "
                "(engine.eval.options.resolve_device turns auto into one)"
            )
        if not isinstance(self.guard, GuardSettings):
            raise TypeError(f"EvalOptions.guard is a {type(self.guard).__name__}, not a GuardSettings")

    @classmethod
    def from_config(
        cls, config: Any, device: str, cache_root: Path | None = None, guard: GuardSettings | None = None
    ) -> EvalOptions:
        """The options an ``engine.config.Config``'s ``[eval]`` table describes (every front end uses this).

        ``device``: the front end's resolved device (``resolve_device``); the config's own ``device`` is
        the user's choice, which only the front end resolves. ``guard``: the run's guard settings when
        the front end laid flags over the config (``engine.cli.guard.guard_settings``); without it,
        the config's ``[guard]`` as it stands (a command that ran the loop merged its flags in there).
        """
        e = config.eval
        return cls(
            device=device,
            trials=e.trials,
            seed=e.seed,
            tolerances=dict(e.tolerances),
            timing=TimingPlan(min_trials=e.timing_trials, budget_s=e.timing_budget_s),
            timeouts=StageTimeouts(**vars(e.timeouts)),
            cache_root=cache_root,
            guard=guard if guard is not None else guard_of(config.guard),
            sandbox=e.sandbox,
            workers=e.workers,
            shapes=e.shapes,
            compile_baselines=tuple(e.compile_baselines),
            build_budget_s=e.build_budget_s,
        )

    def settings(self) -> dict[str, Any]:
        """What the result records about how it was obtained: every option but the machine-local ones.

        Derived from the fields, so an option added later is recorded without a third hand-kept list.
        The guard settings are recorded flat, under the keys results have always had (``relax``,
        ``guard_policy``, ``refuse``), where the field stands.
        """
        recorded: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "guard":
                recorded.update(relax=self.guard.relax, guard_policy=self.guard.policy, refuse=self.guard.refuse)
            elif f.name not in NOT_RECORDED:
                recorded[f.name] = getattr(self, f.name)
        recorded["tolerances"] = {**DEFAULT_TOLERANCES, **self.tolerances}
        return json.loads(json.dumps({k: _plain(v) for k, v in recorded.items()}))


def guard_of(section: Any) -> GuardSettings:
    """The guard settings a config's ``[guard]`` table (an ``engine.config.GuardConfig``) says; its ids
    were checked when the config loaded, so this raises only for a table made by hand."""
    return GuardSettings(section.policy, tuple(section.relax), tuple(section.refuse))


# Where and how this machine ran it (the result's ``device``/``env``/``build`` say so), not how it was judged;
# whether it was timed shows in ``timing`` itself (an evalset times in a second pass).
NOT_RECORDED = frozenset(
    {"device", "cache_root", "gpu_index", "use_pch", "make_pch", "do_timing", "prebuild", "compile_baselines", "workers"}
)


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return list(value) if isinstance(value, tuple) else value


@dataclass
class EvalEvent:
    """Progress of an evaluation for a front end: a stage change, a log line, or a trial."""

    kind: str  # "stage" | "log" | "trial"
    stage: str = ""
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)


class EvaluationError(Exception):
    """The evaluation could not be started at all (bad paths, no CUDA when asked for it)."""


def resolve_device(device: str, *, gpus_elsewhere: bool = False) -> str:
    """Turn the user's ``auto`` into ``cuda`` or ``cpu``; refuse ``cuda`` where there is none.

    Called once per command, by the front end (``engine.cli``, the TUI's loop and exploration entries):
    what it returns goes into :class:`EvalOptions` and down unchanged, so this machine is asked once.
    ``gpus_elsewhere``: the evaluations run on a Ray cluster, not necessarily here, so ``cuda`` is taken
    at its word (a CPU-only head may use a cluster's GPUs) and ``auto`` still means what this host sees.
    """
    if device not in ("auto", "cpu", "cuda"):
        raise EvaluationError(f"unknown device {device!r}: use cpu, cuda or auto")
    if device == "cpu" or (device == "cuda" and gpus_elsewhere):
        return device
    available = cuda_available()
    if device == "cuda" and not available:
        raise EvaluationError(
            "--device cuda was asked for, but torch sees no CUDA GPU here (try --device cpu)"
        )
    return "cuda" if available else "cpu"


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU here: ``torch.cuda.is_available()``, answered without importing torch
    when it is not imported yet and the answer is certain without it.

    A front end that only hands the work to a worker (``cudaforge eval``) would otherwise spend 2-3 s
    importing torch to learn it. Torch's own build file says whether it was built with CUDA (a CPU build
    never sees a GPU); the driver's management library says how many GPUs there are. Anything less
    certain (a ``CUDA_VISIBLE_DEVICES`` choosing devices, no driver library) asks torch itself.
    """
    import sys

    if "torch" not in sys.modules:
        known = _cuda_without_torch()
        if known is not None:
            return known
    import torch

    return torch.cuda.is_available()


def _cuda_without_torch() -> bool | None:
    import importlib.util
    import os
    import re

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    try:
        version = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    built = re.search(r"^cuda\s*(?::[^=]*)?=\s*(.+?)\s*$", version, flags=re.M)
    if built is None:
        return None
    if built.group(1) == "None":
        return False  # a CPU build of torch
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return False if visible.strip() in ("", "-1") else None
    count = _nvml_device_count()
    return None if count is None else count > 0


def _nvml_device_count() -> int | None:
    """GPUs the NVIDIA driver reports (NVML, the library nvidia-smi uses); None without a driver library."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    count = ctypes.c_uint(0)
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
        try:
            return count.value if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else None
        finally:
            nvml.nvmlShutdown()
    except AttributeError:
        return None
