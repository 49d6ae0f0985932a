"""Fault injection, headless: ``cudaforge run`` interrupted at every stage boundary, then resumed.

One session is interrupted again and again, each run at the next boundary and in another way
(Ctrl-C once, Ctrl-C twice, a hang-up, SIGTERM, kill -9), each later run resuming it; the last run
resumes the kill at ``commit`` (committed, not evaluated again) and is hung up on during the last
round's build, which it still finishes and commits. After every
run: no traceback, the exit code the README documents, every evaluated iteration committed (or its
stage redone by the next run), ``git fsck`` clean. At the end the session's history — iteration
numbers, phases, statuses — is the one an uninterrupted run of the same command leaves.

Ctrl-C is SIGINT to the run's whole process group, as a terminal sends it: that is what killed
GitPython's ``git cat-file`` helper and ended every interrupted run in ``NoSuchBranch: session …
has no branch 'main'`` with the last evaluated iteration lost (issue #23, defect 2). The profile
boundary exists only on CUDA (no profiler runs on CPU); it is covered by the CUDA chain below,
and on CPU by tests/test_loop_interrupts.py with the loop's profiler hook.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
import torch

from tests.interrupt_harness import STEADY, Headless, Project, assert_sound, history, journal, release

pytestmark = pytest.mark.slow

ROUNDS = 2
# (boundary, how, exit code, iterations committed afterwards)
CHAIN = [
    ("reference@0", "ctrl-c twice", 130, []),  # leave during the task check
    ("seed@0", "hang-up", 129, []),  # the Coder's call cancelled
    ("build@0", "ctrl-c", 130, [0]),  # defect 2: the build finishes and is committed
    ("judge@1", "kill -9", -9, [0]),
    ("gate@1", "ctrl-c", 130, [0]),
    ("coder@1", "sigterm", 143, [0]),
    ("check@1", "kill -9", -9, [0]),
    ("time@1", "ctrl-c twice", 130, [0]),
    ("commit@1", "kill -9", -9, [0]),  # evaluated, journaled, not yet committed
]
WORKER_STAGES = ("reference", "build", "check", "time")  # a stop does not cut these short


def interrupt(run: Headless, boundary: str, how: str) -> str:
    """Interrupt the held run; returns what it said it was waiting for ("" when it cannot say)."""
    stage = boundary.split("@")[0]
    said = ""
    if how == "kill -9":
        run.kill_9()
    elif how == "hang-up":
        run.signal_group(signal.SIGHUP)  # its terminal is gone: nothing more is printed
    else:
        if how == "sigterm":
            run.proc.send_signal(signal.SIGTERM)
        else:
            run.ctrl_c()
        said = run.wait_line("(Ctrl-C again")
        if how == "ctrl-c twice":
            run.ctrl_c()
            run.wait_line("leaving now")
    if stage in WORKER_STAGES:
        release(run.hold_file)  # the worker stage now ends as it would have
    return said


WAITING_FOR = {
    "reference": "interrupted: waiting for the task check to finish (Ctrl-C again to leave now)",
    "build": "interrupted: waiting for the build of iteration {n} to finish and be committed (Ctrl-C again to leave now)",
    "check": "interrupted: waiting for the correctness check of iteration {n} to finish and be committed",
    "time": "interrupted: waiting for the timing of iteration {n} to finish and be committed",
    "gate": "interrupted: stopping at the approval of iteration {n}",
    "coder": "interrupted: cancelling the Coder's kernel of iteration {n} (it is asked again on resume)",
}


def test_every_boundary_interrupted_then_resumed_gives_the_uninterrupted_history(
    tmp_path: Path, ext_cache: Path, request: pytest.FixtureRequest
) -> None:
    # the uninterrupted run, in a project of its own (only the build cache is shared), runs alongside
    # the interrupted ones; its history is read at the end
    reference = Project(tmp_path / "reference", ext_cache, ROUNDS)
    whole = Headless(reference, [str(reference.root / "relu.py"), "--name", "whole"])
    request.addfinalizer(lambda: whole.alive() and whole.kill_9())

    project = Project(tmp_path / "interrupted", ext_cache, ROUNDS)
    args = [str(project.root / "relu.py"), "--name", "s"]
    killed_pid: int | None = None
    for boundary, how, code, committed in CHAIN:
        run = Headless(project, args, hold=boundary)
        pid = run.held(boundary)
        if killed_pid is not None:  # the dead writer's lock is taken over, and the run says so
            run.wait_line(f"left by pid {killed_pid} (no longer running")
        before = journal(project.session_dir()) if boundary.startswith("commit") else None
        said = interrupt(run, boundary, how)
        assert run.finish() == code, f"{boundary} / {how}:\n{run.text}"
        assert "Traceback" not in run.text and "Error" not in run.text, run.text
        session = project.session_dir()
        assert_sound(session)
        assert [n for n, _, _ in history(session)] == committed, f"{boundary}:\n{run.text}"
        evaluated = sum("→ correct" in line for line in run.lines)
        new = sum("·   committed " in line for line in run.lines)
        if how in ("ctrl-c", "sigterm"):  # stopped cleanly: everything this run evaluated is committed
            assert evaluated == new, run.text
        stage, number = boundary.split("@")
        if said:  # it says what it waits for
            assert WAITING_FOR[stage].format(n=number) in said, said
        if how == "ctrl-c twice":
            assert "leaving now: every committed iteration is kept" in run.text, run.text
        killed_pid = pid if how in ("kill -9", "ctrl-c twice") else None
        args = ["--session", "s"]

    # the last kill left iteration 1 evaluated and journaled: the resume commits it without
    # re-evaluating; then the connection drops during the last round's build, which is committed
    assert before is not None and before["stage"] == "commit"
    last = Headless(project, args, hold="build@2")
    last.held("build@2")
    stages = [line for line in last.lines if re.match(r"iter \d+ · \w", line)]
    assert stages[:2] == ["iter 1 · commit (optimize)", "iter 2 · judge (optimize)"], last.text
    assert not any(line.startswith("iter 1 · evaluate") for line in stages), last.text
    last.signal_group(signal.SIGHUP)
    release(last.hold_file)
    assert last.finish() == 0, last.text  # the rounds ended: 0, even though it was hung up on
    assert "Traceback" not in last.text
    session = project.session_dir()
    assert_sound(session)
    assert whole.finish() == 0, whole.text
    expected = history(reference.session_dir())
    assert expected == [(0, "seed", "correct"), (1, "optimize", "correct"), (2, "optimize", "correct")]
    assert history(session) == expected
    from sessions.repo import SessionRepo

    with SessionRepo.open(session) as repo:
        assert repo.iteration(1).eval_result == before["eval_result"]
    assert journal(session) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_profile_boundary_on_cuda(tmp_path: Path, ext_cache: Path) -> None:
    """On CUDA a correct kernel is profiled before its commit: Ctrl-C there still commits it."""
    project = Project(tmp_path / "p", ext_cache, ROUNDS)
    # a CUDA candidate: the CPU scripts' C++ kernel is refused on CUDA (no __global__), so never profiled
    cuda_scripts = STEADY.parent / "cuda_steady"
    config = (project.root / "cudaforge.toml").read_text().replace('device = "cpu"', 'device = "cuda"')
    (project.root / "cudaforge.toml").write_text(config.replace(str(STEADY), str(cuda_scripts)))
    run = Headless(project, [str(project.root / "relu.py"), "--name", "p"], hold="profile@0")
    run.held("profile@0")
    run.ctrl_c()
    assert "waiting for the profile of iteration 0 to finish and be committed" in run.wait_line("interrupted:")
    release(run.hold_file)
    assert run.finish() == 130, run.text
    assert [n for n, _, _ in history(project.session_dir())] == [0]
    assert_sound(project.session_dir())
