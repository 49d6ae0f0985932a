"""The worker marks each stage's start in its own output (engine.eval.pipe.stage_mark), and the build log is
cut at those marks: the output reaches the log through a thread of its own, so the log's size when a STAGE
message arrives can already hold a short build's words, which left such a build with an empty log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.eval import pipe
from engine.eval.options import EvalEvent, EvalOptions
from engine.eval.result import EvalResult
from engine.eval.supervisor import WorkerSupervisor
from engine.eval.worker import Evaluation


def _supervisor(tmp_path: Path, events: list[EvalEvent] | None = None) -> WorkerSupervisor:
    on_event = events.append if events is not None else None
    return WorkerSupervisor(tmp_path, EvalOptions(device="cpu"), tmp_path / "cache", on_event)


def _failed_build(run: WorkerSupervisor) -> EvalResult:
    run.final = EvalResult(status="compile_error", messages=["error: nope"]).to_dict()
    return run._assemble(0, False)


def test_a_build_whose_words_reached_the_log_before_its_stage_message_keeps_them(tmp_path: Path) -> None:
    """The race itself: the build's output was copied before the supervisor read the STAGE message, so the
    sizes it recorded both lie past the compiler's words. The marks in the output still cut the log right."""
    log = (
        b"the reference speaks\n"
        + pipe.stage_mark("build")
        + b"kernel.cu(3): error: identifier undeclared_here is undefined\n"
        + pipe.stage_mark("check")
        + b"the check speaks\n"
    )
    (tmp_path / "worker.log").write_bytes(log)
    run = _supervisor(tmp_path)
    run.stage_marks = {"build": len(log), "check": len(log)}  # what a late STAGE message left
    result = _failed_build(run)
    assert "undeclared_here" in result.build.log
    assert "the reference speaks" not in result.build.log and "the check speaks" not in result.build.log
    assert pipe.STAGE_MARK not in result.build.log.encode()
    assert "the check speaks" in result.stderr_tail and pipe.STAGE_MARK not in result.stderr_tail.encode()


def test_a_worker_that_built_twice_shows_the_imports_build(tmp_path: Path) -> None:
    """A gated worker builds ahead, waits for its GPU, then imports: the build log is the import's."""
    log = (
        pipe.stage_mark("build")
        + b"ahead of the GPU\n"
        + pipe.stage_mark("gpu_wait")
        + pipe.stage_mark("build")
        + b"at the import\n"
    )
    (tmp_path / "worker.log").write_bytes(log)
    run = _supervisor(tmp_path)
    result = _failed_build(run)
    assert result.build.log.strip() == "at the import"


def test_a_log_without_marks_falls_back_to_the_sizes_the_messages_left(tmp_path: Path) -> None:
    """A log whose head cap dropped the marks: the sizes recorded when the stage messages arrived."""
    (tmp_path / "worker.log").write_bytes(b"before\nthe build\nafter\n")
    run = _supervisor(tmp_path)
    run.stage_marks = {"build": len(b"before\n"), "check": len(b"before\nthe build\n")}
    assert _failed_build(run).build.log == "the build\n"


def test_the_streamed_log_lines_hold_no_marks(tmp_path: Path) -> None:
    events: list[EvalEvent] = []
    (tmp_path / "worker.log").write_bytes(b"one\n" + pipe.stage_mark("build") + b"two\n" + pipe.STAGE_MARK)
    run = _supervisor(tmp_path, events)
    run._drain_log()
    assert [e.text for e in events if e.kind == "log"] == ["one", "two"]  # the unfinished mark waits


def test_the_worker_writes_each_stages_mark_into_its_output(capfd: pytest.CaptureFixture[str]) -> None:
    """Evaluation.stage writes the mark to its output (fd 2) as it tells the engine of the stage."""
    read_fd, write_fd = os.pipe()
    evaluation = Evaluation.__new__(Evaluation)
    evaluation.result = EvalResult(status="runtime_error")
    evaluation.channel = pipe.Channel(write_fd)
    try:
        evaluation.stage("build")
        evaluation.stage("check")
        message = os.read(read_fd, 65536)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert b'"stage": "build"' in message
    err = capfd.readouterr().err.encode()
    assert [stage for stage, _, _ in pipe.marked_stages(err)] == ["build", "check"]
