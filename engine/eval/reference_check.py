"""Run the task's reference ``Model`` on its own inputs before any candidate code (inside the worker).

Why: a task whose reference fails on its own inputs (``get_inputs()`` returning tensors of sizes 10
and 11 for ``a + b``) used to be reported as the candidate's runtime error, and the loop's Judge then
"repaired" a kernel that was not at fault. The worker calls :func:`check_reference` first, on every
seed the check and time stages will use (a reference that fails on only some seeds is caught too),
so a broken task is reported as a task error that names the reference, the exception and the line
of the task file — never as the candidate's failure. The one exception: a compile error in the
candidate's own code, in a call its import surely makes, stops the check (``stop``) so that the import
fails at once (engine.eval.worker, ``reference_sound``).

It runs in the worker, never in the engine's process (ARCHITECTURE.md §1): task code is the user's and may
crash. The reference is built on a private instance, so its extra calls (BatchNorm statistics,
dropout draws) cannot change what the check stage sees.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.eval.job import WorkerJob


@dataclass
class ReferenceFailure:
    """Why the task's reference cannot serve as the ground truth."""

    what: str  # "get_init_inputs", "Model construction", "get_inputs", "Model.forward", "output"
    seed: int | None
    error_type: str
    error_message: str
    line: int | None = None  # the line of the task file the error came from
    code: str = ""  # that line's text
    traceback: str = ""

    def message(self) -> str:
        """One sentence for people: the reference, the exception, the task file's line."""
        on = f" on seed {self.seed}" if self.seed is not None else ""
        where = ""
        if self.line is not None:
            where = f" at line {self.line} of the task file" + (f" (`{self.code}`)" if self.code else "")
        return (
            f"task error: the reference {self.what} failed{on}{where}: {self.error_type}: "
            f"{self.error_message.strip()[:500]} — the task itself is broken, not the kernel"
        )


def check_seeds(job: WorkerJob) -> list[int]:
    """The seeds the worker's stages will draw inputs with: every check trial, then timing's two."""
    base = job.seed
    seeds = [base + 1 + index for index in range(job.trials)]
    if job.do_timing:
        seeds += [base, base + 1000]
    return seeds


def task_line(error: BaseException, task_path: str) -> tuple[int | None, str]:
    """The innermost traceback frame in the task file: its line number and text."""
    line, code = None, ""
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename == task_path:
            line, code = frame.lineno, (frame.line or "").strip()
    return line, code


class ReferenceCutShort(Exception):
    """The check was stopped before its end (``stop``): the candidate's own build failed meanwhile."""


def check_reference(
    task: Any,
    task_path: str,
    seeds: list[int],
    construct_seed: int,
    make_inputs: Callable[[Any, int], list[Any]],
    device: Any,
    sync: Callable[[], None],
    observe: Callable[[list[Any], Any], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> ReferenceFailure | None:
    """Build the reference and run it once per seed; the first failure, or None when it is sound.

    ``observe(inputs, output)`` sees each sound call (the worker measures the task's weak outputs).
    ``stop()``, asked before the model is built and before each seed, True: ReferenceCutShort."""
    import torch

    from engine.eval.compare import compare_outputs

    def failure(what: str, seed: int | None, error: BaseException) -> ReferenceFailure:
        line, code = task_line(error, task_path)
        return ReferenceFailure(
            what=what,
            seed=seed,
            error_type=type(error).__name__,
            error_message=str(error),
            line=line,
            code=code,
            traceback="".join(traceback.format_exception(type(error), error, error.__traceback__))[-8000:],
        )

    if stop is not None and stop():
        raise ReferenceCutShort
    try:
        torch.manual_seed(construct_seed)
        init_inputs = list(task.get_init_inputs())
    except Exception as error:
        return failure("get_init_inputs()", None, error)
    try:
        torch.manual_seed(construct_seed)
        with torch.device(device):
            reference = task.Model(*init_inputs).to(device)
    except Exception as error:
        return failure("Model construction", None, error)
    for seed in seeds:
        if stop is not None and stop():
            raise ReferenceCutShort
        try:
            inputs = make_inputs(task, seed)
        except BaseException as error:
            return failure("get_inputs()", seed, error)
        try:
            with torch.no_grad():
                output = reference(*inputs)
            sync()
        except BaseException as error:
            return failure("Model.forward", seed, error)
        # The reference compared with itself: a NaN/Inf output, or one no candidate could match.
        outcome = compare_outputs(output, output)
        if not outcome.passed:
            return ReferenceFailure(
                what="output",
                seed=seed,
                error_type="UncomparableOutput",
                error_message=f"no candidate could match it: {outcome.message}",
            )
        if observe is not None:
            observe(inputs, output)
        del output, inputs
    return None
