"""The process that loads a user's model: ``python -m engine.model.child JOB.json RESULT.json``.

The user's model is trusted code (like a task file) but heavy and fallible: a model that runs out of
memory, segfaults in an extension or hangs must not take the command line or the workbench with it, and
the constructor-argument hook (``engine.model.initargs``) must not outlive the work. So the parent
(``engine.model.client``) writes a job, this process does it and writes the result as JSON, and says
what it is doing on stderr as ``cf-progress: …`` lines. Actions:

* ``profile``: load, trace, time (``engine.model.profiling``);
* ``extract``: the profile, then the tasks (``engine.model.extract``);
* ``plan``: load and trace, then the task of each module path or task fingerprint ``apply`` names.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

PROGRESS = "cf-progress: "


def progress(text: str) -> None:
    print(PROGRESS + text, file=sys.stderr, flush=True)


def _plan(spec: Any, loaded: Any, job: dict[str, Any]) -> dict[str, Any]:
    from engine.model import extract, groups
    from engine.model.load import run_once
    from engine.model.noise import own_deviation
    from engine.model.trace import trace

    run_once(loaded, spec)
    progress("tracing the model's modules")
    records, _ = trace(loaded.model, loaded.args, loaded.kwargs)
    progress("finding identical modules")
    found = groups.identical(loaded.model, loaded.args, loaded.kwargs, records)
    profile = {"modules": [{"path": p, "total_ms": 0.0} for p in records], "device_ms": 0.0, "gpu": None}
    answers: list[dict[str, Any]] = []
    used: set[str] = set()  # task names unique over the plan: an export keys its tasks and kernels by them
    for target in job["targets"]:
        group = _find(target, found, loaded, spec, records)
        if isinstance(group, str):
            answers.append({"target": target, "error": group})
            continue
        chosen = groups.Group([target["value"]] if target["kind"] == "path" else group.paths, group.type)
        captured = extract.capture(loaded.model, loaded, [chosen.representative])
        outcome = extract.write_and_prove(spec, loaded, records, chosen, captured, used, profile)
        answers.append({"target": target, **({"error": outcome["reason"]} if "reason" in outcome else {"task": outcome})})
    progress("measuring the model's own rounding noise against a higher-precision run")
    noise = own_deviation(spec, loaded)
    return {"plans": answers, "spec": spec.to_dict(), "keywords": list(loaded.kwargs), "noise": noise}


def _find(target: dict[str, Any], found: list[Any], loaded: Any, spec: Any, records: Any) -> Any:
    from engine.model import extract, taskgen

    if target["kind"] == "path":
        for group in found:
            if target["value"] in group.paths:
                return group
        return f"no module at {target['value']!r} that a task can be made of (a module the forward calls, not a container)"
    for group in found:
        try:
            code = extract.write_group(spec, loaded, records, group, "match", "")
        except taskgen.NotStandalone:
            continue
        if code.fingerprint == target["value"]:
            return group
    return "no module of this model gives that task (was it extracted with another --dtype, inputs or model version?)"


def run(job: dict[str, Any]) -> dict[str, Any]:
    from engine.model.load import load
    from engine.model.spec import ModelSpec

    spec = ModelSpec.from_dict(job["spec"])
    seconds: dict[str, float] = {}
    started = time.monotonic()
    progress(f"loading {spec.target} ({spec.dtype}, {spec.device})")
    loaded = load(spec)
    seconds["load"] = time.monotonic() - started
    if job["action"] == "plan":
        result = _plan(spec, loaded, job)
    else:
        from engine.model.profiling import profile

        profiled, records = profile(spec, loaded, progress, passes=int(job.get("passes", 3)))
        result = {"profile": profiled}
        if job["action"] == "extract":
            from engine.model.extract import extract

            started_extract = time.monotonic()
            result.update(extract(spec, loaded, records, result["profile"], int(job.get("top", 5)), progress, bool(job.get("leaves")), job.get("paths") or None))
            seconds["extract"] = time.monotonic() - started_extract
        result["profile"]["seconds"]["load"] = seconds["load"]
    result["seconds"] = {**seconds, "total": time.monotonic() - started}
    return result


def main(argv: list[str]) -> int:
    job_path, result_path = Path(argv[0]), Path(argv[1])
    try:
        result = run(json.loads(job_path.read_text()))
    except Exception as error:  # noqa: BLE001 - every failure reaches the parent as one line
        from engine.model.spec import ModelError

        if isinstance(error, (ModelError, LookupError)):
            result = {"error": str(error).strip("'\"") if isinstance(error, LookupError) else str(error)}
        else:
            result = {"error": f"cudaforge's model process failed: {type(error).__name__}: {error}", "internal": True, "traceback": traceback.format_exc()}
    result_path.write_text(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
