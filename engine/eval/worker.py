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

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from engine.eval import faults, launches
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
    TRIAL,
    VERDICT_FD_ENV,
    Channel,
)
from engine.eval.result import (
    CANDIDATE_SIDE,
    COMPILE_ERROR,
    CORRECT,
    HARNESS_ERROR,
    HARNESS_SIDE,
    INCORRECT,
    REFERENCE_SIDE,
    REJECTED,
    RUNTIME_ERROR,
    BuildInfo,
    EvalResult,
    TrialResult,
)
from engine.eval.values import clone as _clone
from engine.eval.values import to_device


def _error_info(error: BaseException) -> dict[str, str]:
    return {
        "type": type(error).__name__,
        "message": str(error)[:4000],
        "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:],
    }


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
        self.float64: Any = None  # the reference in float64, made when a weak output needs it (engine.eval.arbiter)
        # failed builds, the build budget and the first compiler error, shared by the prebuild thread's
        # recorder and the import's (engine.eval.build.failures)
        self.ledger = BuildLedger(job.build_budget_s)

    def stage(self, name: str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
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
            self.result.error = _error_info(error)
        self.result.harness_fault = faults.record(kind, message, error, stage=self.result.stage, **extra)
        self.result.failed_side, self.result.task_error = HARNESS_SIDE, False
        return self.finish(HARNESS_ERROR, f"cudaforge's own fault ({kind}), not the kernel's: {message}")

    def out_of_memory(self, error: BaseException) -> dict[str, int] | None:
        """Record the GPU's memory at an OOM; the numbers when others held enough to be the cause."""
        memory = faults.gpu_memory(self.device)
        self.result.memory = {**(self.result.memory or {}), "at_oom": memory}
        return memory if faults.contention(memory) else None

    def unexpected(self, error: BaseException) -> EvalResult:
        """An exception no stage caught: whose fault it is decides the status (engine.eval.faults)."""
        stage = self.result.stage
        text = f"{type(error).__name__}: {error}"
        fault = self._our_fault(error)
        if fault is not None:
            return self.harness(fault.kind, fault.message, error)
        if faults.is_oom(error):
            shared = self.out_of_memory(error)
            if shared:
                return self.harness(
                    faults.OOM_CONTENTION,
                    f"out of GPU memory in stage {stage} while other processes held most of it "
                    f"({faults.describe_memory(shared)})",
                    error,
                )
        candidate = self.candidate_ran and (
            faults.is_oom(error)
            or faults.is_cuda_error(error)
            or faults.passes_through(error, self.job.kernel_path)
        )
        if candidate:
            self.result.error = _error_info(error)
            return self.finish(RUNTIME_ERROR, f"evaluation failed in stage {stage}: {text}")
        if faults.passes_through(error, self.job.task_path):  # the task's own code raised
            self.result.error = _error_info(error)
            self.result.failed_side, self.result.task_error = REFERENCE_SIDE, True
            return self.finish(RUNTIME_ERROR, f"the task's code failed in stage {stage}: {text}")
        kind = faults.IMPORT if isinstance(error, ImportError) else faults.INTERNAL
        return self.harness(kind, f"stage {stage}: {text}", error)

    def _our_fault(self, error: BaseException) -> faults.HarnessFault | None:
        """The build hook's own recorded failure, when it is what went wrong (during the build, or in
        ``error``'s chain later). Only the object the hook kept counts: a candidate that raises a
        HarnessFault of its own is not believed."""
        recorder = getattr(self, "recorder", None)
        ours = recorder.fault if recorder is not None else None
        if ours is not None and (self.result.stage == "build" or faults.in_chain(error, ours)):
            return ours
        return None

    def record_memory(self) -> None:
        """The allocator's peaks over the whole evaluation (host-side counters: safe after a fault)."""
        import torch

        if self.device.type != "cuda" or not torch.cuda.is_initialized():
            return
        try:
            peaks = {
                "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(self.device)),
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(self.device)),
            }
        except Exception:  # noqa: BLE001 - measuring must never change the verdict
            return
        self.result.memory = {**peaks, **(self.result.memory or {})}

    # -- stages ---------------------------------------------------------------------------
    def run(self) -> EvalResult:
        from engine.eval import envinfo
        from engine.tasks import import_module_from_source

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
        started = time.monotonic()
        try:
            task = import_module_from_source(Path(self.job.task_path).read_text(), self.job.task_path)
        except BaseException as error:  # the task is the user's: say so plainly
            self.result.error = _error_info(error)
            self.result.failed_side, self.result.task_error = REFERENCE_SIDE, True
            return self.finish(RUNTIME_ERROR, f"the task failed to import: {type(error).__name__}: {error}")

        self.result.durations["setup_task"] = time.monotonic() - started
        from engine.eval.precision import PrecisionPin

        self.pin = PrecisionPin()
        self.result.env["precision_flags"] = self.pin.record()
        if not self.reference_sound(task):
            return self.result
        if self.job.reference_only:  # the loop's task check: nothing of a candidate runs
            return self.finish(CORRECT)
        candidate = self.build()
        if candidate is None or self.precision_changed("its import") or self.extension_failed():
            return self.result
        models = self.construct(task, candidate)
        if models is None or self.precision_changed("ModelNew's constructor"):
            return self.result
        reference, new = models
        if not self.check(task, reference, new) or self.extension_failed():
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

    def reference_sound(self, task: Any) -> bool:
        """The reference on its own inputs, every seed the later stages use; False: a task error."""
        from engine.eval import degenerate
        from engine.eval.reference_check import check_reference, check_seeds
        from engine.eval.stale import byte_sizes

        self.stage("reference")
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

        failure = check_reference(
            task,
            self.job.task_path,
            check_seeds(self.job),
            self.job.seed,
            self.make_inputs,
            self.device,
            self.sync,
            observe,
        )
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
        self.warm_profiler()  # while the prebuild thread compiles
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
            fault = self._our_fault(error)
            if fault is not None:
                self.harness(fault.kind, fault.message, error)
                return None
            environment = faults.environment_problem(error)
            if environment:
                self.harness(faults.ENVIRONMENT, f"the extension could not be built here: {environment}", error)
                return None
            self.result.error = _error_info(error)
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
        self.result.build = BuildInfo(seconds=time.monotonic() - started, extensions=list(recorder.builds))
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
            self.result.error = _error_info(error)
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
            self.result.error = _error_info(error)
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

    def extension_failed(self) -> bool:
        """A ``load_inline`` call failed, no later one worked, and the candidate went on (it caught the
        error): whatever it returns was not computed by that extension. True when that ends the
        evaluation (a refusal, or a harness fault when the machine could not build)."""
        recorder = getattr(self, "recorder", None)
        failed = getattr(recorder, "failed", [])
        if not failed or any(f["rule"] == "extension-load-failed" for f in self.result.findings):
            return False
        for error in getattr(recorder, "failed_errors", []):
            environment = faults.environment_problem(error)
            if environment:  # the machine could not build (no toolkit, a full disk): not the candidate's doing
                self.harness(faults.ENVIRONMENT, f"the extension could not be built here: {environment}", error)
                return True
        return self.guard(
            "extension-load-failed",
            f"load_inline failed for {'; '.join(failed)}, and the candidate caught the error and went on: "
            "its results come from some other code path (a fallback), not from that extension",
        )

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

    def call_candidate(
        self, new: Any, inputs: list[Any], index: int, seed: int
    ) -> tuple[Any, list[Any]] | None:
        """One candidate call on a private copy of the inputs, on NaN-filled free memory, its flags
        verified after; None (and a verdict) when it raised or changed a flag."""
        arguments = _clone(inputs)
        self.poison()
        try:
            output = new(*arguments)
            self.sync()
        except BaseException as error:
            if faults.is_oom(error):
                shared = self.out_of_memory(error)
                if shared:
                    self.harness(
                        faults.OOM_CONTENTION,
                        "ModelNew.forward ran out of GPU memory while other processes held most of it "
                        f"({faults.describe_memory(shared)})",
                        error,
                    )
                    return None
            self.result.error = _error_info(error)
            message = f"{type(error).__name__}: {error}"[:1000]
            self.result.trials.append(TrialResult(index=index, seed=seed, passed=False, message=message))
            self.finish(
                RUNTIME_ERROR, f"ModelNew.forward raised {type(error).__name__}: {str(error).strip()[:500]}"
            )
            return None
        if self.precision_changed(f"ModelNew.forward (trial {index})"):
            return None
        return output, arguments

    def check(self, task: Any, reference: Any, new: Any) -> bool:
        """``trials`` rounds of fresh seeded inputs; the candidate runs before and after the reference,
        each time on NaN-filled free memory; weak outputs get the spread check (engine.eval.degenerate)."""
        import torch

        from engine.eval.degenerate import SpreadCheck

        base = self.job.seed
        spread = SpreadCheck.for_weak(self.result.weak_outputs)
        earlier: list[Any] = []  # the previous trial's outputs, kept alive so their memory cannot be reused
        for index in range(self.job.trials):
            seed = base + 1 + index
            with torch.no_grad():
                inputs = self.make_inputs(task, seed)
                before = self.call_candidate(new, inputs, index, seed)
                if before is None:
                    return False
                reference_inputs = _clone(inputs)
                expected = reference(*reference_inputs)
                self.sync()
                after = self.call_candidate(new, inputs, index, seed)
                if after is None:
                    return False
                (got, arguments), (got_again, _) = before, after
                if self.runtime_guards(inputs, reference_inputs, arguments, got, got_again, earlier):
                    return False
                outcome = self.compare_both(expected, got, got_again)
                if outcome.passed and self.degenerate_refused(expected, [got, got_again], inputs, reference):
                    return False
                spread.add(expected, got, inputs, seed)
                spread.add(expected, got_again, inputs, seed)
            earlier = [got, got_again]
            if not self.record_trial(index, seed, outcome):
                return False
        return not self.spread_refused(spread, task, reference)

    def compare_both(self, expected: Any, got: Any, got_again: Any) -> Any:
        """The first call's comparison, or the second's when only that one fails."""
        from engine.eval.compare import compare_outputs

        outcome = compare_outputs(expected, got, self.job.tolerances)
        if outcome.passed:
            second = compare_outputs(expected, got_again, self.job.tolerances)
            if not second.passed:
                second.message = f"on the call after the reference: {second.message}"
                outcome = second
        if not outcome.passed and "non-finite" in outcome.message:
            outcome.message += (
                "; free memory is filled with NaN before every candidate call, so a kernel that reads "
                "or returns memory it never wrote fails here"
            )
        return outcome

    def record_trial(self, index: int, seed: int, outcome: Any) -> bool:
        trial = TrialResult(
            index=index,
            seed=seed,
            passed=outcome.passed,
            max_abs_error=outcome.max_abs_error,
            max_rel_error=outcome.max_rel_error,
            message=outcome.message,
        )
        self.result.trials.append(trial)
        self.channel.send(TRIAL, trial=trial.__dict__)
        if not outcome.passed:
            self.finish(INCORRECT, f"trial {index} (seed {seed}): {outcome.message}")
            return False
        return True

    def degenerate_refused(self, expected: Any, outputs: list[Any], inputs: list[Any], reference: Any) -> bool:
        """A weak output the candidate answered degenerately (zeros, a constant, an input): refused, unless
        the float64 arbiter finds the exact answer constant to rounding and the answer within rounding
        of it (then it is the right answer: engine.eval.arbiter)."""
        from engine.eval.degenerate import first_degenerate

        found = None
        for record in self.result.weak_outputs:
            found = first_degenerate([record], expected, outputs, inputs)
            if found and not self.rescued(reference, expected, outputs, inputs, [found[0]], degenerate=True):
                break
            found = None
        if found is None:
            return False
        where, kind = found
        what = {"zeros": "all zeros", "constant": "one constant"}.get(kind, f"{kind} returned unchanged")
        return self.guard(
            "output-degenerate",
            f"{where} is {what} where the reference's is not; the task is weak there (a "
            "degenerate answer passes its tolerance), so this is not accepted as correct",
        )

    def spread_refused(self, spread: Any, task: Any, reference: Any) -> bool:
        """The weak outputs' error against the reference's spread over every trial; True when failed.

        A failed output goes to the float64 arbiter first (engine.eval.arbiter): the candidate passes
        there when its error to the float64 reference is at the level of the float32 reference's own."""
        from engine.eval.degenerate import SPREAD_LIMIT

        failures = spread.failures()
        if not failures:
            return False
        arbitration = self.arbitrate_spread(spread, failures, task, reference)
        remaining = [
            f for f in failures if not arbitration.accepts(f["output"], degenerate=f["constant_across_trials"])
        ]
        rulings = {r.output: r for r in arbitration.rulings}
        for where in dict.fromkeys(f["output"] for f in failures):
            if where in rulings and where not in {f["output"] for f in remaining}:
                self.result.messages.append(rulings[where].message())
        for failure in remaining:
            where, error = failure["output"], failure["relative_error"]
            baseline = "spread" if failure["check"] == "spread" else f"distance from {failure['check']}"
            if where in rulings:
                note = f"; {rulings[where].message()}"
            else:
                note = f"; the float64 arbiter could not judge it, so the spread rule decides: {arbitration.unavailable}"
            if failure["constant_across_trials"]:
                return self.guard(
                    "output-degenerate",
                    f"{where} is the same for every trial's inputs while the reference's changes with them{note}",
                )
            self.finish(
                INCORRECT,
                f"{where} passes the tolerance only because the task is weak there: its error is "
                f"{error:.3g} of the reference's {baseline} (at most {SPREAD_LIMIT:g} passes){note}",
            )
            return True
        return False

    def float64_reference(self, reference: Any) -> Any:
        """The reference cast to float64, made once per evaluation at its first use."""
        from engine.eval.arbiter import Float64Reference

        if self.float64 is None:
            self.float64 = Float64Reference(reference, self.sync)
        return self.float64

    def arbitrate_spread(self, spread: Any, failures: list[dict[str, Any]], task: Any, reference: Any) -> Any:
        """The float64 arbiter over every trial of the failed weak outputs: each trial's inputs drawn
        again from its seed, the float32 reference run again (it must give the kept output) and the
        float64 one beside it. Only here, where a weak output's check failed, is the price paid."""
        import torch

        from engine.eval.arbiter import judge_spread

        started = time.monotonic()
        float64 = self.float64_reference(reference)

        def rerun(seed: int) -> tuple[Any, Any] | None:
            try:
                inputs = self.make_inputs(task, seed)
                with torch.no_grad():
                    expected = reference(*_clone(inputs))
                self.sync()
            except Exception as error:  # noqa: BLE001 - the arbiter is unavailable, the spread rule decides
                float64.unavailable = f"the reference failed when run again: {type(error).__name__}: {error}"[:400]
                return None
            truth = float64(_clone(inputs))
            return None if truth is None else (expected, truth)

        paths = list(dict.fromkeys(f["output"] for f in failures))
        arbitration = judge_spread(spread, paths, rerun, float64)
        self.record_arbitration(arbitration)
        self.add_seconds("float64_arbiter", started)
        return arbitration

    def rescued(
        self, reference: Any, expected: Any, outputs: list[Any], inputs: list[Any], paths: list[str], degenerate: bool
    ) -> bool:
        """Whether the float64 arbiter accepts the candidate's ``outputs`` to one call at ``paths``
        (``degenerate``: only where the exact answer is constant to rounding)."""
        from engine.eval.arbiter import Arbitration, judge_call

        started = time.monotonic()
        float64 = self.float64_reference(reference)
        truth = float64(_clone(inputs))
        arbitration = (
            Arbitration([], float64.unavailable)
            if truth is None
            else judge_call(paths, expected, outputs, truth, float64)
        )
        self.record_arbitration(arbitration)
        self.add_seconds("float64_arbiter", started)
        return bool(paths) and all(arbitration.accepts(where, degenerate) for where in paths)

    def record_arbitration(self, arbitration: Any) -> None:
        """The arbiter's rulings kept on the result (``EvalResult.arbiter``), over every call judged."""
        found = arbitration.record()
        record = self.result.arbiter or {"outputs": [], "constant_to_rounding": False, "unavailable": None}
        record["outputs"].extend(found["outputs"])
        record["constant_to_rounding"] = record["constant_to_rounding"] or found["constant_to_rounding"]
        record["unavailable"] = record["unavailable"] or found["unavailable"]
        self.result.arbiter = record

    def runtime_guards(
        self,
        inputs: list[Any],
        reference_inputs: list[Any],
        arguments: list[Any],
        got: Any,
        got_again: Any,
        earlier: list[Any],
    ) -> bool:
        """The per-trial runtime checks; True when one refused the kernel."""
        from engine.guard import runtime as rg

        posing = rg.non_tensor_outputs([got, got_again])
        if posing and self.guard(
            "output-not-tensor",
            f"outputs of type {', '.join(sorted(set(posing)))}; exact torch.Tensor required",
        ):
            return True
        aliased = rg.aliased_outputs(got, arguments)
        if aliased and self.guard("output-aliases-input", f"output(s) {aliased} share storage with an input"):
            return True
        theirs = set(rg.mutated_inputs(inputs, reference_inputs))
        self.reference_mutates = self.reference_mutates or bool(theirs)
        changed = set(rg.mutated_inputs(inputs, arguments)) - theirs
        if changed and self.guard(
            "input-mutated",
            f"forward modified input(s) {sorted(changed)}, which the reference leaves unchanged",
        ):
            return True
        reused = rg.reused_outputs(got_again, [got]) or rg.reused_outputs(got, earlier)
        return bool(reused) and self.guard(
            "output-cached", f"output(s) {reused} reuse the storage of a previous call's output"
        )

    def warm_profiler(self) -> None:
        """Start the PyTorch profiler once, at the start of the build stage, when the launch check will
        need it (engine.guard.share.warm_profiler): with the extensions prebuilt in a thread meanwhile, its
        start-up (CUPTI) overlaps their compile instead of adding to the check. In this thread: kineto
        refuses a client registered from another one."""
        if self.device.type != "cuda" or not self.job.kernel_names or not self.job.guards:
            return
        if launches.memo_path(self).is_file():
            return
        from engine.guard import share

        started = time.monotonic()
        try:
            share.warm_profiler()
        except Exception:  # noqa: BLE001 - a cold start is only slower; the check reports its own failure
            return
        finally:
            self.add_seconds("profiler_warmup", started)

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
        result = evaluation.unexpected(error)
    evaluation.record_memory()
    sys.stdout.flush()
    sys.stderr.flush()
    channel.send(RESULT, result=result.to_dict())
    # Skip interpreter teardown: after a CUDA fault, destructors may hang or crash.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
