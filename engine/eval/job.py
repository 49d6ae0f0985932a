"""The job file: what the evaluator tells its worker process, one typed definition for both ends.

The evaluator (``engine.eval.evaluate``) writes a ``WorkerJob`` as ``job.json`` in the candidate's job
folder; the worker (``engine.eval.worker``), a separate and sandboxed process, reads it back. Before
this type the two sides shared a plain dict, so a key renamed on one side silently fell back to a
default on the other (a timing flag that never arrived looked like "time it"). Now a missing or
unknown key, a wrong type or another version is a ``JobError`` that names the field, and the worker
reports it as a harness failure instead of guessing. See ARCHITECTURE.md §3 (Evaluation), step 2.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from engine.eval.timing import TimingPlan

JOB_VERSION = 1


class JobError(ValueError):
    """A job file the worker cannot trust: unreadable, from another version, or with bad fields."""


@dataclass(frozen=True)
class WorkerJob:
    """Everything one evaluation's worker needs; paths are absolute, as the worker sees them."""

    task_path: str
    kernel_path: str
    cache_root: str
    device: str  # "cuda", "cuda:N" or "cpu": already resolved, never "auto"
    seed: int
    trials: int
    task_name: str = ""
    tolerances: dict[str, float] = field(default_factory=dict)
    timing: TimingPlan | None = None  # None: no timing stage
    use_pch: bool = True
    make_pch: bool = True  # False: use headers made already, ask for none (EvalOptions.make_pch)
    guards: bool = True
    relax_runtime: tuple[str, ...] = ()
    refuse_runtime: tuple[str, ...] = ()
    kernel_names: tuple[str, ...] = ()  # the candidate's own kernels, from its source
    cpu_threads: int = 0  # 0: leave torch's thread count alone
    reference_only: bool = False  # the loop's task check: only the reference runs
    check_shapes: bool = False  # re-check correctness at perturbed sizes (engine.eval.shapes)
    prebuild: bool = True  # build the extensions the source names while the reference is checked
    build_budget_s: float | None = 180.0  # every build of this evaluation together (engine.eval.build.failures)
    # {library path: sha256} the task's import may load from the build cache (engine.eval.build.reference)
    trusted_libraries: dict[str, str] = field(default_factory=dict)
    # build first, then wait on stdin for the engine's word before any GPU work (engine.eval.pipe, GPU_WAIT)
    gated: bool = False
    version: int = JOB_VERSION

    @property
    def do_timing(self) -> bool:
        return self.timing is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # TimingPlan nests as a dict; tuples become lists

    def write(self, path: Path) -> Path:
        data = json.loads(json.dumps(self.to_dict()))
        WorkerJob.from_dict(data)  # a bad job fails here, in the evaluator, with its own traceback
        path.write_text(json.dumps(data))
        return path

    @classmethod
    def from_dict(cls, data: Any) -> WorkerJob:
        if not isinstance(data, dict):
            raise JobError(f"a job is a JSON object, not {type(data).__name__}")
        if data.get("version") != JOB_VERSION:
            raise JobError(
                f"job version {data.get('version')!r}, this worker reads version {JOB_VERSION} "
                "(the evaluator and the worker come from different cudaforge installs)"
            )
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise JobError(f"unknown job field(s): {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            values[name] = _checked(name, known[name].type, value)
        try:
            return cls(**values)
        except TypeError as error:  # a required field is missing
            raise JobError(f"incomplete job: {error}") from None

    @classmethod
    def read(cls, path: Path) -> WorkerJob:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise JobError(f"cannot read the job file {path}: {error}") from None
        return cls.from_dict(data)


_SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float)}


def _checked(name: str, annotation: str, value: Any) -> Any:
    """``value`` as the field's type, or a ``JobError`` naming the field (annotations are strings here)."""
    kind = annotation.split("|")[0].strip()
    if annotation.endswith("| None") and value is None:
        return None
    if kind in _SCALARS:
        ok = isinstance(value, _SCALARS[kind]) and not (kind in ("int", "float") and isinstance(value, bool))
        if ok:
            return float(value) if kind == "float" else value
    elif kind == "tuple[str, ...]":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
    elif kind == "dict[str, str]":
        if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return dict(value)
    elif kind == "dict[str, float]":
        if isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in value.items()
        ):
            return {k: float(v) for k, v in value.items()}
    elif kind == "TimingPlan" and isinstance(value, dict):
        unknown = sorted(set(value) - {f.name for f in fields(TimingPlan)})
        if unknown:
            raise JobError(f"unknown field(s) in job field {name}: {', '.join(unknown)}")
        known = {f.name: f.type for f in fields(TimingPlan)}
        return TimingPlan(**{k: _checked(f"{name}.{k}", str(known[k]), v) for k, v in value.items()})
    raise JobError(f"job field {name} should be {annotation}, got {type(value).__name__} {value!r:.60}")
