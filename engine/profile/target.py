"""The process a profiler watches: ``python -m engine.profile.target JOB.json``.

It builds the candidate through the evaluator's build hook (so the evaluation's cached build is
reused), warms it up, then runs exactly one forward inside the NVTX range ``cudaforge_forward`` —
ncu's ``--nvtx-include cudaforge_forward/`` profiles just that call. In ``torch-profiler`` mode it
instead records per-kernel CUDA times with the PyTorch profiler (the fallback when hardware counters
are unavailable) and writes them to the job's ``output`` file as JSON. Its properties of the device
go there too, so the engine can pick the GPU's spec without touching CUDA itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from sessions.lock import pid_alive

NVTX_RANGE = "cudaforge_forward"
WARMUP_CALLS = 3
# A target started before its kernel's verdict (engine.profile.candidate.ProfileRun, early) waits for one
# of these files in its work folder before it imports the candidate or starts CUDA.
GO_FILE, STOP_FILE = "go", "stop"
HOLD_LIMIT_S = 1800.0  # a verdict never came: the evaluating process is gone


def _device_properties(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "major": props.major,
        "minor": props.minor,
        "multi_processor_count": props.multi_processor_count,
        "total_memory": props.total_memory,
        "L2_cache_size": getattr(props, "L2_cache_size", None),
        "shared_memory_per_multiprocessor": getattr(props, "shared_memory_per_multiprocessor", None),
        "shared_memory_per_block_optin": getattr(props, "shared_memory_per_block_optin", None),
        "regs_per_multiprocessor": getattr(props, "regs_per_multiprocessor", None),
        "max_threads_per_multi_processor": getattr(props, "max_threads_per_multi_processor", None),
    }


def wait_for_go(
    go: Path, stop: Path, limit_s: float = HOLD_LIMIT_S, poll_s: float = 0.02, parent: int | None = None
) -> bool:
    """True once ``go`` exists; False on ``stop``, after ``limit_s``, or once the evaluating process
    ``parent`` is gone (killed: nobody will say go; under bwrap the sandbox ends with it instead)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if stop.exists():
            return False
        if go.exists():
            return True
        if parent is not None and not pid_alive(parent):
            return False
        time.sleep(poll_s)
    return False



def main(job_path: str) -> int:
    import torch

    from engine.eval.build.extension import BuildRecorder
    from engine.sandbox.landlock import apply_from_env
    from engine.tasks import import_module_from_source

    apply_from_env()  # Landlock mode: confined before the candidate is read
    job = json.loads(Path(job_path).read_text())
    task = import_module_from_source(Path(job["task_path"]).read_text(), job["task_path"])
    BuildRecorder(Path(job["cache_root"])).install()
    parent = job.get("parent_pid") if os.environ.get("CUDAFORGE_SANDBOX") != "bwrap" else None  # own pid space
    if job.get("go_file") and not wait_for_go(Path(job["go_file"]), Path(job["stop_file"]), parent=parent):
        return 0  # not needed: nothing of the candidate ran, CUDA never started
    candidate = import_module_from_source(Path(job["kernel_path"]).read_text(), job["kernel_path"])
    torch.manual_seed(int(job.get("seed", 42)))
    init_inputs = list(task.get_init_inputs())
    with torch.device("cuda"):
        model = candidate.ModelNew(*init_inputs).cuda()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    report: dict = {"device": _device_properties(torch)}
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            model(*inputs)
        torch.cuda.synchronize()
        if job.get("mode", "ncu") == "torch-profiler":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                model(*inputs)
                torch.cuda.synchronize()
            kernels: dict[str, list[float]] = {}
            for event in prof.events():
                if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA:
                    entry = kernels.setdefault(event.name, [0.0, 0])
                    entry[0] += float(getattr(event, "device_time", 0.0) or getattr(event, "cuda_time", 0.0))
                    entry[1] += 1
            report["kernels"] = [[name, t, int(calls)] for name, (t, calls) in kernels.items()]
        else:
            with torch.cuda.nvtx.range(NVTX_RANGE):
                model(*inputs)
            torch.cuda.synchronize()
    if job.get("output"):
        Path(job["output"]).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
