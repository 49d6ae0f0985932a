"""The evaluation worker: ``python -m engine.eval.worker JOB.json``, one fresh process per evaluation.

It runs the stages build → check → time on one candidate and reports over a private pipe whose
file descriptor it takes from ``CUDAFORGE_VERDICT_FD`` (and removes from the environment before
any candidate code runs). Whatever the candidate prints goes to stdout/stderr, which the engine
keeps as a log and never parses, so printing cannot forge a verdict.

The engine (``engine.eval.evaluate``) owns the timeouts and kills this process's whole group when a
stage runs over. A kernel that crashes the process (segfault, abort) or poisons the CUDA context
(an illegal memory access) is reported by the engine from what this worker sent before it died;
this worker never outlives one evaluation, so a poisoned context is never reused.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from engine.eval import blame, faults, launches
from engine.eval.build.failures import BuildBudgetSpent, BuildLedger
from engine.eval.job import JobError, WorkerJob
from engine.eval.pipe import (
    BUILD,
    BUILD_DIR,
    GO_LINE,
    GPU_WAIT,
    PROVISIONAL,
    READY,
    RESULT,
    SPARE_FLAG,
    STAGE,
    VERDICT_FD_ENV,
    Channel,
    stage_mark,
)
from engine.eval.result import (
    CANDIDATE_SIDE,
    COMPILE_ERROR,
    CORRECT,
    HARNESS_ERROR,
    HARNESS_SIDE,
    REFERENCE_SIDE,
    REJECTED,
    RUNTIME_ERROR,
    BuildInfo,
    EvalResult,
    error_info,
)
from engine.eval.values import to_device


class Evaluation:
    """The stages of one evaluation, sending progress after each so a crash loses nothing."""

    def __init__(self, job: WorkerJob, channel: Channel) -> None:
        import torch

        self.job = job
        self.channel = channel
        self.device = torch.device(job.device)
        self.result = EvalResult(status=RUNTIME_ERROR, device=job.device, task=job.task_name)
        self.candidate_ran = False  # set once the candidate's import starts: its code may have run
        self.pin: Any = None  # the numeric-mode flags as before any candidate code (engine.eval.precision)
        self.output_sizes: list[int] = []  # the reference's last output storage sizes (the CPU NaN fill)
        self.prebuild: Any = None  # the thread building the candidate's extensions ahead (engine.eval.build.prebuild)
        self.reference_mutates = False  # the reference changed its inputs in a trial (the candidate may too)
        self.l2: Any = None  # the persisting-L2 limit before any candidate code ran (engine.eval.l2), on CUDA
        self.profiler_warming: Any = None  # the profiler's warm-up on its own thread (engine.guard.profiler_thread)
        self.float64: Any = None  # the reference in float64, made when a weak output needs it (engine.eval.arbiter)
        # failed builds, the build budget and the first compiler error, shared by the prebuild thread's
        # recorder and the import's (engine.eval.build.failures)
        self.ledger = BuildLedger(job.build_budget_s)

    def stage(self, name: str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError):  # the output's mark cuts the build log (engine.eval.pipe)
            os.write(2, stage_mark(name))
        self.result.stage = name
        self.channel.send(STAGE, stage=name)

    def finish(self, status: str, message: str | None = None) -> EvalResult:
        self.result.status = status
        if status != CORRECT and self.result.failed_side is None:
            self.result.failed_side = CANDIDATE_SIDE
        if message:
            self.result.messages.append(message)
        return self.result

    def harness(self, kind: str, message: str, error: BaseException | None = None, **extra: Any) -> EvalResult:
        """cudaforge's own fault (engine.eval.faults): no verdict on the kernel, whatever stage it was."""
        if error is not None:
            self.result.error = error_info(error)
        self.result.harness_fault = faults.record(kind, message, error, stage=self.result.stage, **extra)
        self.result.failed_side, self.result.task_error = HARNESS_SIDE, False
        return self.finish(HARNESS_ERROR, f"cudaforge's own fault ({kind}), not the kernel's: {message}")

    # -- stages ---------------------------------------------------------------------------
    def run(self) -> EvalResult:
        from engine.eval import envinfo

        if self.device.type == "cpu":
            from engine.eval.hostheap import keep_freed_memory

            self.result.settings["host_heap_kept"] = keep_freed_memory()
        if self.device.type == "cpu" and self.job.cpu_threads:
            import torch

            torch.set_num_threads(self.job.cpu_threads)
        self.prebuild = self.start_prebuild()
        if self.job.gated:
            self.await_gpu()
        started = time.monotonic()
        self.result.env = envinfo.collect(self.job.device)  # on CUDA this starts CUDA
        self.result.durations["setup_device"] = time.monotonic() - started
        if self.device.type == "cuda":
            import torch

            from engine.eval.l2 import PersistingL2

            torch.empty(1, device=self.device)  # the context the driver reads the limit from must exist
            self.l2 = PersistingL2()  # read before the candidate's import can change it
            self.warm_profiler()  # on its own thread, through the task's import and the candidate's build
        started = time.monotonic()
        try:
            task = self.import_task()
        except BaseException as error:  # the task is the user's: say so plainly
            self.result.error = error_info(error)
            self.result.failed_side, self.result.task_error = REFERENCE_SIDE, True
            return self.finish(RUNTIME_ERROR, f"the task failed to import: {type(error).__name__}: {error}")

        self.result.durations["setup_task"] = time.monotonic() - started
        from engine.eval.precision import PrecisionPin

        self.pin = PrecisionPin()
        self.result.env["precision_flags"] = self.pin.record()
        sound = self.reference_sound(task)
        if sound is False:
            return self.result
        if self.job.reference_only:  # the loop's task check: nothing of a candidate runs
            return self.finish(CORRECT)
        candidate = self.build()
        if candidate is None or self.precision_changed("its import") or blame.extension_failed(self):
            return self.result
        if sound is None and not self.reference_sound(task, after_import=True):
            return self.result
        models = self.construct(task, candidate)
        if models is None or self.precision_changed("ModelNew's constructor"):
            return self.result
        reference, new = models
        if not self.check(task, reference, new) or blame.extension_failed(self):
            return self.result
        if self.job.guards and launches.launch_refused(self, task, reference, new):
            return self.result
        if self.job.guards and self.device.type == "cpu":
            self.cpu_share(task, new)
        if self.job.do_timing and not self.time(task, reference, new):
            return self.result
        if self.precision_changed("timing"):
            return self.result
        return self.late_stages(task, reference, new)

    def late_stages(self, task: Any, reference: Any, new: Any) -> EvalResult:
        """Ablation and shapes: after the verdict's evidence is in, since a kernel run at another shape
        or without its own kernels may crash the process. The result so far goes to the engine first,
        so a crash here keeps it (engine.eval.supervisor)."""
        from engine.eval import late

        ablation = self.job.guards and late.ablation_applies(self)
        if not ablation and not self.job.check_shapes:
            self.stage("done")
            return self.finish(CORRECT)
        self.result.status = CORRECT
        self.channel.send(PROVISIONAL, result=self.result.to_dict())
        if ablation and late.own_kernels_unneeded(self, task, reference, new):
            return self.result
        if self.job.check_shapes and late.shapes_refused(self, task, reference, new):
            return self.result
        self.stage("done")
        return self.finish(CORRECT)

    def import_task(self) -> Any:
        """The task's module; a reference library an earlier evaluation ran comes from the build cache
        (engine.eval.build.reference), recorded apart from the candidate's builds."""
        from engine.tasks import import_module_from_source

        source, path = Path(self.job.task_path).read_text(), self.job.task_path
        if not self.job.trusted_libraries:
            return import_module_from_source(source, path)
        from engine.eval.build.reference import ReferenceBuilds, building_references

        builds = ReferenceBuilds(
            Path(self.job.cache_root), Path(path).parent / "reference-builds", self.job.trusted_libraries, self.job.use_pch
        )
        try:
            with building_references(builds):
                return import_module_from_source(source, path)
        finally:
            self.result.build.reference_extensions = list(builds.loaded)
            self.result.build.reference_notes = list(builds.notices)

    def reference_sound(self, task: Any, after_import: bool = False) -> bool | None:
        """The reference on its own inputs, every seed the later stages use; False: a task error. None: cut
        short because the prebuild thread met a compiler error in the candidate's own code in a call its import
        makes for sure (``StaticCall.certain``), so that import (next) fails at once and ends the evaluation
        without waiting for the reference. Should the import succeed anyway (a candidate that fooled the
        reading of its source), the reference is checked after it (``after_import``), and a failure there is
        the candidate's: its code ran first (ARCHITECTURE.md §3, "A round's own time")."""
        from engine.eval import degenerate
        from engine.eval.reference_check import ReferenceCutShort, check_reference, check_seeds
        from engine.eval.stale import byte_sizes

        # after the import, a crash or an overrun here is not known to be the task's: under the check's name,
        # the evaluating process blames the candidate for it (engine.eval.evaluate, mark_failed_side)
        self.stage("check" if after_import else "reference")
        found: list[list[dict[str, Any]]] = []
        previous: list[Any] = []  # the last seed's output, while small enough to keep

        def observe(inputs: list[Any], output: Any) -> None:
            started = time.monotonic()
            found.append(degenerate.weak_outputs(output, inputs, self.job.tolerances))
            if previous:
                found.append(degenerate.input_blind_outputs(output, previous.pop(), self.job.tolerances))
            self.output_sizes = byte_sizes(output)
            if sum(self.output_sizes) <= degenerate.KEEP_PREVIOUS_BYTES:
                previous.append(output)
            self.add_seconds("weak_outputs", started)

        own_error = None if after_import or self.prebuild is None else (lambda: self.ledger.own_error_seen)
        try:
            failure = check_reference(
                task,
                self.job.task_path,
                check_seeds(self.job),
                self.job.seed,
                self.make_inputs,
                self.device,
                self.sync,
                observe,
                stop=own_error,
            )
        except ReferenceCutShort:
            self.result.settings["reference_cut_short"] = True
            return None
        if after_import:
            self.result.settings["reference_after_import"] = True
        if failure is None:
            self.result.weak_outputs = degenerate.merge_weak(found)
            if self.result.weak_outputs:
                self.result.messages.append(degenerate.describe_weak(self.result.weak_outputs))
            return True
        if failure.error_type == "OutOfMemoryError" or "CUDA out of memory" in failure.error_message:
            shared = faults.gpu_memory(self.device)
            self.result.memory = {**(self.result.memory or {}), "at_oom": shared}
            if faults.contention(shared):
                self.harness(
                    faults.OOM_CONTENTION,
                    "the reference ran out of GPU memory while other processes held most of it "
                    f"({faults.describe_memory(shared)})",
                )
                return False
        self.result.error = {
            "type": failure.error_type,
            "message": failure.error_message[:4000],
            "traceback": failure.traceback,
        }
        if after_import:  # the candidate's import ran before it: not known to be the task's
            self.result.failed_side, self.result.task_error = CANDIDATE_SIDE, False
            self.finish(RUNTIME_ERROR, f"after the candidate's import (its own build had failed first): {failure.message()}")
            return False
        self.result.failed_side, self.result.task_error = REFERENCE_SIDE, True
        self.finish(RUNTIME_ERROR, failure.message())
        return False

    def target_arch(self) -> None:
        """Build for this GPU only (TORCH_CUDA_ARCH_LIST), not for every architecture torch knows."""
        import torch

        if self.device.type == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
            major, minor = torch.cuda.get_device_capability(self.device)
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"

    def await_gpu(self) -> None:
        """A gated job (an exploration's check): the extensions its source names are built first, then
        the worker waits for the engine's word that its GPU is held (engine.eval.pipe, GPU_WAIT). Before
        the word it only reads the GPU's compute capability (the build's target) and launches nothing, so
        a build never holds a GPU another evaluation waits for. Builds the source does not name are
        made at the import, after the word, as always."""
        before = self.result.stage
        if self.prebuild is not None:
            self.stage("build")
            self.prebuild.wait()
        self.stage(GPU_WAIT)
        if not wait_for_go():
            os._exit(0)  # the evaluating process went away: nobody waits for a verdict
        self.result.stage = before  # the engine's clock is back in setup (engine.eval.supervisor)

    def start_prebuild(self) -> Any:
        """The candidate's extensions built in a thread while the reference is checked, when its source
        says what they are (engine.eval.build.prebuild); None when nothing can be built ahead."""
        if self.job.reference_only or not self.job.prebuild:
            return None
        from engine.eval.build.prebuild import Prebuild, read_calls

        calls = read_calls(Path(self.job.kernel_path).read_text())
        if not calls:
            return None
        from engine.eval.build.extension import BuildRecorder

        recorder = BuildRecorder(
            Path(self.job.cache_root),
            on_build_dir=lambda d, lines: self.channel.send(BUILD_DIR, path=d, host_lines=lines),
            use_pch=self.job.use_pch,
            make_pch=self.job.make_pch,
        )
        recorder.fallback = False  # a failed split build is built again, and falls back, at the import
        recorder.ledger = self.ledger

        def prepare() -> None:
            self.target_arch()
            recorder.attach()

        return Prebuild(recorder, calls, prepare=prepare).start()

    def build(self) -> Any:
        """Import the candidate; its ``load_inline`` calls build through our hook (or find the prebuild
        thread's build done)."""
        from engine.eval.build.extension import BuildRecorder
        from engine.tasks import import_module_from_source

        self.stage("build")
        self.target_arch()
        recorder = BuildRecorder(
            Path(self.job.cache_root),
            on_build_dir=lambda d, lines: self.channel.send(BUILD_DIR, path=d, host_lines=lines),
            use_pch=self.job.use_pch,
            make_pch=self.job.make_pch,
        )
        if self.prebuild is not None:
            recorder.prebuilt = self.prebuild.recorder.prebuilt
        recorder.ledger = self.ledger
        recorder.install()
        self.recorder = recorder
        started = time.monotonic()
        self.candidate_ran = True
        try:
            module = import_module_from_source(
                Path(self.job.kernel_path).read_text(), self.job.kernel_path, "cudaforge_candidate"
            )
        except BaseException as error:
            self._record_build(recorder, started)
            fault = blame.our_fault(self, error)
            if fault is not None:
                self.harness(fault.kind, fault.message, error)
                return None
            environment = faults.environment_problem(error)
            if environment:
                self.harness(faults.ENVIRONMENT, f"the extension could not be built here: {environment}", error)
                return None
            self.result.error = error_info(error)
            if self.ledger.first_error:  # the compiler's own first error leads, whatever was noted before
                self.result.messages.insert(0, self.ledger.first_error)
            if isinstance(error, BuildBudgetSpent):
                self.finish(COMPILE_ERROR, f"the extensions were not all built: {error}")
                return None
            what = (
                "the extension failed to build"
                if recorder.builds and not recorder.builds[-1].ok
                else "the candidate failed to load"
            )
            self.finish(COMPILE_ERROR, f"{what}: {type(error).__name__}: {str(error).strip()[:500]}")
            return None
        self._record_build(recorder, started)
        if recorder.fault is not None:  # the candidate caught our failure and went on: still no verdict
            self.harness(recorder.fault.kind, recorder.fault.message)
            return None
        if not hasattr(module, "ModelNew"):
            self.finish(
                COMPILE_ERROR,
                "the candidate defines no class ModelNew (KernelBench format: class ModelNew(nn.Module))",
            )
            return None
        return module

    def _record_build(self, recorder: Any, started: float) -> None:
        self.result.build = BuildInfo(
            seconds=time.monotonic() - started,
            extensions=list(recorder.builds),
            reference_extensions=self.result.build.reference_extensions,
            reference_notes=self.result.build.reference_notes,
        )
        if self.prebuild is not None:  # what the prebuild thread noticed (a stale lock it took over)
            self.result.messages.extend(n for n in self.prebuild.recorder.notices if n not in recorder.notices)
        self.result.messages.extend(recorder.notices)
        self.channel.send(BUILD, build=self.result.to_dict()["build"])

    def construct(self, task: Any, candidate: Any) -> tuple[Any, Any] | None:
        """Build ``Model`` and ``ModelNew`` from the same seed and ``get_init_inputs()``."""
        import torch

        self.stage("check")
        seed = self.job.seed
        try:
            torch.manual_seed(seed)
            init_inputs = list(task.get_init_inputs())
            torch.manual_seed(seed)
            with torch.device(self.device):
                reference = task.Model(*init_inputs).to(self.device)
        except BaseException as error:
            self.result.error = error_info(error)
            self.result.failed_side, self.result.task_error = REFERENCE_SIDE, True
            self.finish(
                RUNTIME_ERROR, f"the reference Model failed to construct: {type(error).__name__}: {error}"
            )
            return None
        try:
            torch.manual_seed(seed)
            with torch.device(self.device):
                new = candidate.ModelNew(*init_inputs).to(self.device)
        except BaseException as error:
            self.result.error = error_info(error)
            self.finish(RUNTIME_ERROR, f"ModelNew failed to construct: {type(error).__name__}: {error}")
            return None
        return reference, new

    def make_inputs(self, task: Any, seed: int) -> list[Any]:
        import torch

        torch.manual_seed(seed)
        with torch.device(self.device):
            return list(to_device(list(task.get_inputs()), self.device))

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def guard(self, rule: str, message: str) -> bool:
        """Record a runtime guard finding; True when it refuses the kernel (not relaxed, not a warning)."""
        from engine.guard.runtime import refuses, runtime_finding

        finding = runtime_finding(rule, message, self.job.relax_runtime, self.job.refuse_runtime)
        self.result.findings.append(finding)
        if not refuses(finding) or not self.job.guards:
            return False
        self.finish(REJECTED, f"refused by the runtime guard [{rule}]: {message}")
        return True

    def precision_changed(self, when: str) -> bool:
        """A numeric-mode flag the candidate changed (put back at once); True when that refuses it."""
        changes = self.pin.changed() if self.pin is not None else []
        if not changes:
            return False
        return self.guard(
            "precision-changed",
            f"{when} changed {', '.join(changes)}; put back, since the reference runs under the pinned flags",
        )

    def poison(self) -> None:
        """Free memory filled with NaN before a candidate call (engine.eval.stale)."""
        from engine.eval.stale import poison_free_memory

        started = time.monotonic()
        filled = poison_free_memory(self.device, self.output_sizes)
        stats = self.result.settings.setdefault("nan_fill", {"calls": 0, "bytes": 0})
        stats["calls"] += 1
        stats["bytes"] = max(stats["bytes"], filled)
        self.add_seconds("nan_fill", started)

    def add_seconds(self, what: str, started: float) -> None:
        """Time a defence spent inside a stage (``durations["defence_<what>"]``), so its cost shows."""
        key = f"defence_{what}"
        self.result.durations[key] = self.result.durations.get(key, 0.0) + time.monotonic() - started

    def check(self, task: Any, reference: Any, new: Any) -> bool:
        """The check stage (engine.eval.check_stage); False when the candidate failed or was refused there."""
        from engine.eval import check_stage

        return check_stage.check(self, task, reference, new)


    def warm_profiler(self) -> None:
        """Start the PyTorch profiler's warm-up on its own thread when the launch check will need it
        (engine.guard.profiler_thread): it overlaps the task's import and the candidate's build, and a
        candidate that fails before the check never waits for it."""
        if self.device.type != "cuda" or not self.job.kernel_names or not self.job.guards:
            return
        if launches.memo_path(self).is_file():
            return
        from engine.guard import share

        self.profiler_warming = share.warm_profiler()  # its seconds: recorded by the launch check

    def cpu_share(self, task: Any, new: Any) -> None:
        """On CPU, record the wall-time share of the forward spent inside the C++ extension (never refuses)."""
        import torch

        from engine.guard import share

        modules = getattr(getattr(self, "recorder", None), "modules", [])
        if not modules:
            return
        inputs = self.make_inputs(task, self.job.seed)
        try:
            with torch.no_grad():
                self.result.kernel_share = share.cpu_extension_share(modules, lambda: new(*inputs))
        except Exception as error:  # measuring must never change the verdict
            self.result.messages.append(f"the CPU own-kernel share could not be measured: {error}")

    def time(self, task: Any, reference: Any, new: Any) -> bool:
        """The timing stage (engine.eval.timing_stage); False when the candidate was refused there."""
        from engine.eval.timing_stage import time_stage

        return time_stage(self, task, reference, new)


def warm_imports() -> None:
    """What every evaluation imports, loaded by a spare worker while it waits for its job
    (engine.eval.spare): torch and the stages' modules. Never CUDA, which starts with the job."""
    import torch  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    from engine.eval import compare, degenerate, envinfo, floor, precision, reference_check, stale, timing  # noqa: F401
    from engine.eval.build import extension, prebuild  # noqa: F401
    from engine.guard import runtime, share  # noqa: F401


def wait_for_go() -> bool:
    """A spare's wait for its job, or a gated job's for its GPU, on stdin; False when the evaluating
    process went away first."""
    line = sys.stdin.buffer.readline()
    return line == GO_LINE


def main(argv: list[str]) -> int:
    fd_text = os.environ.pop(VERDICT_FD_ENV, None)
    spare = len(argv) == 3 and argv[1] == SPARE_FLAG
    if fd_text is None or (len(argv) != 2 and not spare):
        print(
            "usage: CUDAFORGE_VERDICT_FD=N python -m engine.eval.worker [--spare] JOB.json (started by cudaforge)",
            file=sys.stderr,
        )
        return 2
    channel = Channel(int(fd_text))
    from engine.sandbox.landlock import apply_from_env

    apply_from_env()  # Landlock mode: confine this process before any candidate code is read
    if spare:
        warm_imports()
        if not wait_for_go():
            os._exit(0)
        argv = [argv[0], argv[2]]
    try:
        job = WorkerJob.read(Path(argv[1]))
    except JobError as error:  # never guess a setting: say what is wrong with the job and stop
        channel.send(READY, pid=os.getpid())
        failed = EvalResult(status=RUNTIME_ERROR, stage="start", messages=[f"cudaforge worker: {error}"])
        failed.error = {"type": "JobError", "message": str(error)}
        channel.send(RESULT, result=failed.to_dict())
        return 1
    channel.send(READY, pid=os.getpid())
    evaluation = Evaluation(job, channel)
    try:
        result = evaluation.run()
    except BaseException as error:  # reported rather than lost; whose fault it is decides the status
        result = blame.unexpected(evaluation, error)
    blame.record_memory(evaluation)
    sys.stdout.flush()
    sys.stderr.flush()
    channel.send(RESULT, result=result.to_dict())
    # Skip interpreter teardown: after a CUDA fault, destructors may hang or crash.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
