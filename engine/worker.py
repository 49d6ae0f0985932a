"""The evaluation worker: ``python -m engine.worker JOB.json``, one fresh process per evaluation.

It runs the stages build → check → time on one candidate and reports over a private pipe whose
file descriptor it takes from ``CUDAFORGE_VERDICT_FD`` (and removes from the environment before
any candidate code runs). Whatever the candidate prints goes to stdout/stderr, which the engine
keeps as a log and never parses, so printing cannot forge a verdict.

The engine (``engine.evaluate``) owns the timeouts and kills this process's whole group when a
stage runs over. A kernel that crashes the process (segfault, abort) or poisons the CUDA context
(an illegal memory access) is reported by the engine from what this worker sent before it died;
this worker never outlives one evaluation, so a poisoned context is never reused.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from engine.result import (
    COMPILE_ERROR,
    CORRECT,
    INCORRECT,
    RUNTIME_ERROR,
    BuildInfo,
    EvalResult,
    TrialResult,
)

VERDICT_FD_ENV = "CUDAFORGE_VERDICT_FD"


class Channel:
    """JSON-lines messages to the engine over the private pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, kind: str, **payload: Any) -> None:
        line = json.dumps({"type": kind, "t": time.time(), **payload}, default=str) + "\n"
        data = line.encode()
        while data:
            written = os.write(self.fd, data)
            data = data[written:]


def _error_info(error: BaseException) -> dict[str, str]:
    return {
        "type": type(error).__name__,
        "message": str(error)[:4000],
        "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:],
    }


def _to_device(value: Any, device: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _clone(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(v) for v in value)
    return value


class Evaluation:
    """The stages of one evaluation, sending progress after each so a crash loses nothing."""

    def __init__(self, job: dict[str, Any], channel: Channel) -> None:
        import torch

        self.job = job
        self.channel = channel
        self.device = torch.device(job["device"])
        self.result = EvalResult(status=RUNTIME_ERROR, device=job["device"], task=job.get("task_name", ""))
        self.result.settings = job.get("settings", {})

    def stage(self, name: str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.result.stage = name
        self.channel.send("stage", stage=name)

    def finish(self, status: str, message: str | None = None) -> EvalResult:
        self.result.status = status
        if message:
            self.result.messages.append(message)
        return self.result

    # -- stages ---------------------------------------------------------------------------
    def run(self) -> EvalResult:
        from engine import envinfo
        from engine.tasks import import_module_from_source

        self.result.env = envinfo.collect(self.job["device"])
        try:
            task = import_module_from_source(Path(self.job["task_path"]).read_text(), self.job["task_path"])
        except BaseException as error:  # the task is the user's: say so plainly
            self.result.error = _error_info(error)
            return self.finish(RUNTIME_ERROR, f"the task failed to import: {type(error).__name__}: {error}")

        candidate = self.build()
        if candidate is None:
            return self.result
        models = self.construct(task, candidate)
        if models is None:
            return self.result
        reference, new = models
        if not self.check(task, reference, new):
            return self.result
        if self.job.get("do_timing", True):
            self.time(task, reference, new)
        self.stage("done")
        return self.finish(CORRECT)

    def build(self) -> Any:
        """Import the candidate; its ``load_inline`` calls build through our hook."""
        import torch

        from engine.build import BuildRecorder
        from engine.tasks import import_module_from_source

        self.stage("build")
        if self.device.type == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
            major, minor = torch.cuda.get_device_capability(self.device)
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # one target, not every arch
        recorder = BuildRecorder(
            Path(self.job["cache_root"]),
            on_build_dir=lambda d: self.channel.send("build_dir", path=d),
            use_pch=self.job.get("use_pch"),
        )
        recorder.install()
        started = time.monotonic()
        try:
            module = import_module_from_source(
                Path(self.job["kernel_path"]).read_text(), self.job["kernel_path"], "cudaforge_candidate"
            )
        except BaseException as error:
            self._record_build(recorder, started)
            self.result.error = _error_info(error)
            what = (
                "the extension failed to build"
                if recorder.builds and not recorder.builds[-1].ok
                else "the candidate failed to load"
            )
            self.finish(COMPILE_ERROR, f"{what}: {type(error).__name__}: {str(error).strip()[:500]}")
            return None
        self._record_build(recorder, started)
        if not hasattr(module, "ModelNew"):
            self.finish(
                COMPILE_ERROR,
                "the candidate defines no class ModelNew (KernelBench format: class ModelNew(nn.Module))",
            )
            return None
        return module

    def _record_build(self, recorder: Any, started: float) -> None:
        self.result.build = BuildInfo(seconds=time.monotonic() - started, extensions=list(recorder.builds))
        self.result.messages.extend(recorder.notices)
        self.channel.send("build", build=self.result.to_dict()["build"])

    def construct(self, task: Any, candidate: Any) -> tuple[Any, Any] | None:
        """Build ``Model`` and ``ModelNew`` from the same seed and ``get_init_inputs()``."""
        import torch

        self.stage("check")
        seed = int(self.job["seed"])
        try:
            torch.manual_seed(seed)
            init_inputs = list(task.get_init_inputs())
            torch.manual_seed(seed)
            with torch.device(self.device):
                reference = task.Model(*init_inputs).to(self.device)
        except BaseException as error:
            self.result.error = _error_info(error)
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
            return list(_to_device(list(task.get_inputs()), self.device))

    def sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def check(self, task: Any, reference: Any, new: Any) -> bool:
        """``trials`` rounds of fresh seeded inputs; every output compared."""
        import torch

        from engine.compare import compare_outputs

        tolerances = self.job.get("tolerances") or {}
        base = int(self.job["seed"])
        for index in range(int(self.job["trials"])):
            seed = base + 1 + index
            with torch.no_grad():
                inputs = self.make_inputs(task, seed)
                expected = reference(*_clone(inputs))
                self.sync()
                try:
                    got = new(*_clone(inputs))
                    self.sync()
                except BaseException as error:
                    self.result.error = _error_info(error)
                    self.result.trials.append(
                        TrialResult(
                            index=index,
                            seed=seed,
                            passed=False,
                            message=f"{type(error).__name__}: {error}"[:1000],
                        )
                    )
                    self.finish(
                        RUNTIME_ERROR,
                        f"ModelNew.forward raised {type(error).__name__}: {str(error).strip()[:500]}",
                    )
                    return False
                outcome = compare_outputs(expected, got, tolerances)
            trial = TrialResult(
                index=index,
                seed=seed,
                passed=outcome.passed,
                max_abs_error=outcome.max_abs_error,
                max_rel_error=outcome.max_rel_error,
                message=outcome.message,
            )
            self.result.trials.append(trial)
            self.channel.send("trial", trial=trial.__dict__)
            if not outcome.passed:
                self.finish(INCORRECT, f"trial {index} (seed {seed}): {outcome.message}")
                return False
        return True

    def time(self, task: Any, reference: Any, new: Any) -> None:
        import torch

        from engine.timing import TimingPlan, time_models

        self.stage("time")
        plan = TimingPlan(**self.job.get("timing", {}))
        inputs = self.make_inputs(task, int(self.job["seed"]))
        with torch.no_grad():
            timing = time_models(lambda: new(*inputs), lambda: reference(*inputs), self.device, plan)
        self.result.timing = timing
        if timing.candidate.median_ms > 0:
            self.result.speedup = timing.reference.median_ms / timing.candidate.median_ms


def main(argv: list[str]) -> int:
    fd_text = os.environ.pop(VERDICT_FD_ENV, None)
    if fd_text is None or len(argv) != 2:
        print(
            "usage: CUDAFORGE_VERDICT_FD=N python -m engine.worker JOB.json (started by cudaforge)",
            file=sys.stderr,
        )
        return 2
    channel = Channel(int(fd_text))
    job = json.loads(Path(argv[1]).read_text())
    channel.send("ready", pid=os.getpid())
    evaluation = Evaluation(job, channel)
    try:
        result = evaluation.run()
    except BaseException as error:  # a failure of the harness itself, reported rather than lost
        evaluation.result.error = _error_info(error)
        result = evaluation.finish(
            RUNTIME_ERROR,
            f"evaluation failed in stage {evaluation.result.stage}: {type(error).__name__}: {error}",
        )
    sys.stdout.flush()
    sys.stderr.flush()
    channel.send("result", result=result.to_dict())
    # Skip interpreter teardown: after a CUDA fault, destructors may hang or crash.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
