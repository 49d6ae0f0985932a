"""``cudaforge bench --ray ADDRESS``: every task as a Ray task that asks for one GPU (or one CPU).

Ray is the distributed engine, so this module only maps the bench onto it (installing and joining Ray:
:mod:`engine.batch.ray`): one remote call per
task runs the task's commands with :func:`engine.bench.runner.execute` on whichever node Ray
picks (Ray sets ``CUDA_VISIBLE_DEVICES`` for a task that asked for a GPU), and sends each output
line back through a Ray queue so the bench prints progress and writes statuses from one place.

``--ray auto`` starts a local Ray instance (or joins the one ``RAY_ADDRESS`` names); any other
value is passed to ``ray.init(address=…)``, e.g. ``ray://head:10001`` or ``auto``'s cluster form
``host:6379``. On several hosts, every node needs cudaforge installed and ``--out`` (the sessions)
and the task files on a shared filesystem at the same paths, and the working directory's
``cudaforge.toml`` present there too.

A Ctrl-C cancels the tasks: a running one passes SIGINT to its session, which stops after its
stage, so a rerun continues where it stopped — the same resume as the local runner.
"""

from __future__ import annotations

import os
import queue as local_queue
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.batch.ray import connect, import_ray, runtime_env
from sessions.secrets import scrub_text

if TYPE_CHECKING:
    from engine.bench.runner import Bench, TaskPlan
    from engine.bench.tasks import BenchTask


def run_remote_task(
    name: str, commands: list[list[str]], cwd: str, lines: Any, stop_after: tuple[int, ...] = ()
) -> dict[str, Any]:
    """The body of one Ray task: run the commands here, lines to the driver; their codes and seconds."""
    from engine.bench.runner import child_env, execute

    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")  # set by Ray for a task with num_gpus=1
    lines.put((name, "\x00start", socket.gethostname() + (f" GPU {gpu}" if gpu else "")))
    started = time.monotonic()
    codes = execute(
        commands,
        Path(cwd) if os.path.isdir(cwd) else None,
        child_env(None),  # keeps Ray's CUDA_VISIBLE_DEVICES
        lambda line: lines.put((name, line, "")),
        None,  # the driver keeps the log
        lambda command: lines.put((name, "\x00command", command)),
        stop_after,
    )
    return {"codes": codes, "seconds": time.monotonic() - started}


def run_on_ray(bench: Bench, todo: list[tuple[BenchTask, TaskPlan]]) -> int:
    """Run ``todo`` as Ray tasks; the number of tasks whose session run failed."""
    if not todo:
        return 0
    ray = import_ray()
    from ray.util.queue import Empty, Queue

    options = bench.options
    assert options.ray is not None
    connect(ray, options.ray, options.workers, options.device)
    resources = {"num_gpus": 1, "num_cpus": 1} if options.device == "cuda" else {"num_cpus": 1}
    remote = ray.remote(run_remote_task).options(max_retries=0, **runtime_env(), **resources)
    lines = Queue()
    pending: dict[Any, tuple[BenchTask, TaskPlan]] = {}
    logs: dict[str, Path] = {}
    resumed_names: set[str] = set()
    try:
        for task, plan in todo:
            if plan.resumed:
                resumed_names.add(task.name)
            ref = remote.remote(task.name, plan.commands, str(options.cwd), lines, plan.stop_after)
            pending[ref] = (task, plan)
            logs[task.name] = bench.log_path(task)
            logs[task.name].parent.mkdir(parents=True, exist_ok=True)
        failures = 0
        cancelled = False
        while pending:
            try:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.2)
                _drain(lines, bench, logs, resumed_names, Empty)
                for ref in ready:
                    task, plan = pending.pop(ref)
                    _drain(lines, bench, logs, resumed_names, Empty)  # lines sent before it returned
                    try:
                        outcome = ray.get(ref)
                    except Exception as error:  # the task itself died (node lost, worker crash)
                        bench.progress.say(f"[{task.name}] Ray task failed: {type(error).__name__}: {error}")
                        outcome = {"codes": [1], "seconds": 0.0}
                    failures += bench.record(task, plan, outcome["codes"], outcome["seconds"])
            except KeyboardInterrupt:
                if cancelled:
                    raise
                cancelled = True
                bench.progress.say("stopping: the running tasks finish their stage (Ctrl-C again to leave)")
                for ref in pending:
                    ray.cancel(ref)
        return failures
    finally:
        ray.shutdown()


def _drain(lines: Any, bench: Bench, logs: dict[str, Path], resumed: set[str], empty: type) -> None:
    while True:
        try:
            name, line, extra = lines.get_nowait()  # extra: where it runs, or the command line
        except (empty, local_queue.Empty):
            return
        if line == "\x00start":
            bench.progress.started(name, extra, name in resumed)
            continue
        line = scrub_text(line)  # the bench log and the screen never show a key
        with logs[name].open("a", encoding="utf-8") as log:
            log.write(f"$ {extra}\n" if line == "\x00command" else line + "\n")
        if line != "\x00command":
            bench.progress.line(name, line)
