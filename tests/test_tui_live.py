"""The live path: a loop running in a worker thread drives the panes through engine events.

``FakeLoop`` is a test double with the loop's interface (the real loop is driven from the workbench
in tests/test_tui_real_loop.py): it has the loop's methods, runs inside the adapter's real thread workers, emits real
``engine.events`` dataclasses through ``on_event`` from that thread, and records a real iteration
in the real session repository when a suggestion is approved.
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from engine import events as ev
from sessions.repo import SessionRepo
from tests.test_tui_fixtures import SUGGESTION, eval_dict, kernel, screen_text
from tui.app import CudaforgeApp
from tui.messages import ApprovalDecided, EngineEvent, KernelEdited, LoopCommand
from tui.screens.approval import ApprovalScreen
from tui.screens.dialogs import HelpScreen
from tui.screens.workbench import WorkbenchScreen
from tui.widgets.conversation import ConversationPane
from tui.widgets.footer import KeyFooter
from tui.widgets.kernel_pane import KernelPane
from tui.widgets.status_line import StatusLine

pytestmark = pytest.mark.asyncio


class FakeLoop:
    """Test double for the loop (see the module docstring)."""

    def __init__(self, repo: SessionRepo, on_event: Any, flagged: bool = False) -> None:
        self.repo, self.emit, self.flagged = repo, on_event, flagged
        self.calls: list[tuple[str, Any]] = []
        self.gate = threading.Event()  # the slow build waits on it
        self.threads: set[str] = set()
        self.policies: list[str] = []  # what the workbench told the loop about approvals

    def step(self) -> None:
        self.calls.append(("step", None))
        self.threads.add(threading.current_thread().name)
        self.emit(ev.StageStarted(stage="build", round=4, iteration=4))
        for k in range(3):
            self.emit(ev.BuildLog(line=f"[{k}/3] nvcc relu.cu"))
        self.gate.wait(10)  # a kernel that takes a while to build
        self.emit(ev.EvalFinished(result=eval_dict("correct", 2.2)))
        self.emit(ev.StageStarted(stage="judge", round=4))
        for piece in ("**Bottle", "neck:** mem", "ory bound"):
            self.emit(ev.LLMToken(role="judge", text=piece))
        self.emit(
            ev.LLMReply(
                role="judge",
                model="anthropic/claude-sonnet-4-5",
                text="**Bottleneck:** memory bound",
                input_tokens=300,
                output_tokens=40,
                cost_usd=0.05,
            )
        )
        self.emit(ev.SuggestionReady(suggestion=SUGGESTION))
        self.emit(ev.AwaitingApproval(suggestion=SUGGESTION, flagged=self.flagged))

    def run(self) -> None:
        self.calls.append(("run", None))

    def set_approval_policy(self, name: str) -> None:
        self.policies.append(name)

    def pause(self) -> None:
        self.calls.append(("pause", None))
        self.gate.set()

    def stop(self) -> None:  # as the loop's: the build in flight is not cut short (the gate stays shut)
        self.calls.append(("stop", None))

    def close(self) -> None:
        self.calls.append(("close", None))

    def approve(self, suggestion: Any) -> None:
        self.calls.append(("approve", suggestion))
        number = self.repo.record_iteration(
            kernel_source=kernel(4),
            eval_result=eval_dict("correct", 2.2),
            suggestion=suggestion,
            tokens=340,
            cost_usd=0.05,
        )
        self.emit(ev.IterationCommitted(iteration=number, phase="optimize", status="correct", speedup=2.2))

    def reject(self, note: str) -> None:
        self.calls.append(("reject", note))

    def edit_kernel(self, source: str) -> None:
        self.calls.append(("edit_kernel", source))

    def branch_from(self, iteration: int) -> None:
        self.calls.append(("branch_from", iteration))


def _live_app(root: Path, flagged: bool = False) -> tuple[CudaforgeApp, SessionRepo, list[FakeLoop]]:
    repo = SessionRepo.open("relu-demo", root)
    loops: list[FakeLoop] = []

    def factory(session: SessionRepo, on_event: Any) -> FakeLoop:
        loops.append(FakeLoop(session, on_event, flagged))
        return loops[-1]

    return CudaforgeApp(sessions_root=root, session=repo, mode="live", loop_factory=factory), repo, loops


async def _settle(app: CudaforgeApp, pilot: Any) -> None:
    for _ in range(200):  # the loop's calls run in the adapter's own thread, not as Textual workers
        if not app.engine_busy():
            break
        await pilot.pause(0.05)
    await pilot.pause(0.25)  # let the posted events and the token flush timer land


async def test_step_streams_events_from_a_thread_and_approve_commits(session_root) -> None:
    app, repo, loops = _live_app(session_root)
    messages: list = []
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.pause()
        loop = loops[0]
        await pilot.press("s")
        await pilot.pause(0.2)
        assert app.screen.query_one(StatusLine).busy and "⏳ build" in screen_text(app)
        assert "[2/3] nvcc relu.cu" in screen_text(app)  # the build log streams while the build runs
        loop.gate.set()
        await _settle(app, pilot)
        assert isinstance(app.screen, ApprovalScreen)  # policy "ask": the modal is up
        assert "memory bound" in screen_text(app) and "vectorize loads" in screen_text(app)
        await pilot.press("a")
        await _settle(app, pilot)
        assert isinstance(app.screen, WorkbenchScreen)
        text = screen_text(app)
        assert "kernel · iter 4 (main)" in text and "2.20x" in text
    assert [c[0] for c in loop.calls] == ["step", "approve", "close"] and loop.calls[1][1] == SUGGESTION
    assert not any(name == "MainThread" for name in loop.threads)
    assert [m.method for m in messages if isinstance(m, LoopCommand)] == ["step", "approve"]
    kinds = {type(m.event).__name__ for m in messages if isinstance(m, EngineEvent)}
    assert {
        "StageStarted",
        "BuildLog",
        "LLMToken",
        "LLMReply",
        "AwaitingApproval",
        "IterationCommitted",
    } <= kinds
    decided = [m for m in messages if isinstance(m, ApprovalDecided)]
    assert [(d.decision, d.by) for d in decided] == [("approve", "human")]
    assert repo.history("main")[-1].number == 4
    repo.close()


async def test_keys_respond_while_a_slow_stage_runs(session_root) -> None:
    app, repo, loops = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause(0.1)
        assert app.engine_busy()
        await pilot.press("f1")  # help opens and closes while the build blocks its thread
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "c")
        assert app.screen.query_one(KernelPane).view == "cuda"
        await pilot.press("x")  # pause reaches the loop at once, while step still runs
        await _settle(app, pilot)
        assert ("pause", None) in loops[0].calls and not app.engine_busy()
        await pilot.press("escape")  # close the approval the step ended with
    repo.close()


async def test_a_second_step_while_one_runs_is_refused_and_says_why(session_root) -> None:
    """Two quick ``s`` presses once ran Loop.step() twice at once (issue #23): while a stage runs the
    keys that start one are dimmed and start nothing, and the adapter refuses any other caller, saying why."""
    app, repo, loops = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s")
        await pilot.pause(0.2)
        await pilot.press("s", "r")
        await pilot.pause(0.2)
        footer = {e.description: e for e in app.screen.query_one(KeyFooter).entries()}
        assert not footer["Step one stage"].enabled and not footer["Run rounds"].enabled
        assert not app.screen.adapter.call("step")  # e.g. the command palette while a stage runs
        await pilot.pause(0.2)
        text = " ".join(n.message for n in app._notifications)
        assert "step: a stage is already running (the build of iteration 4)" in text
        loops[0].gate.set()
        await _settle(app, pilot)
    assert [c[0] for c in loops[0].calls] == ["step", "close"]  # one step; the lock went back on exit
    repo.close()


async def test_quit_while_busy_waits_for_the_stage_says_for_what_and_exits(session_root) -> None:
    app, repo, loops = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s")
        await pilot.pause(0.2)
        await pilot.press("q")
        await pilot.pause(0.3)
        assert app.is_running and ("stop", None) in loops[0].calls  # the loop was asked to stop
        text = " ".join(" ".join(n.message for n in app._notifications).split())
        assert "waiting for the build of iteration 4 to finish and be committed — ctrl+q again to leave now" in text
        loops[0].gate.set()  # the build ends: the app quits by itself
        for _ in range(100):
            if not app.is_running:
                break
            await pilot.pause(0.05)
        assert app.return_value == 0 and not app.is_running
    assert ("close", None) in loops[0].calls  # the writer lock went back when the screen went
    repo.close()


async def test_quit_twice_while_busy_leaves_at_once(session_root) -> None:
    app, repo, loops = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("s")
        await pilot.pause(0.2)
        await pilot.press("ctrl+q")
        await pilot.pause(0.1)
        assert app.is_running
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.return_value == 130 and not app.is_running
        assert [a.describe() for a in app.left_running] == ["the build of iteration 4"]
    loops[0].gate.set()
    repo.close()


async def test_approval_edit_and_reject_reach_the_loop(session_root) -> None:
    app, repo, loops = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        loops[0].gate.set()
        await pilot.press("s")
        await _settle(app, pilot)
        await pilot.press("e")
        await pilot.press(*"use half2 ")
        await pilot.press("ctrl+s")
        await _settle(app, pilot)
        approved = loops[0].calls[-1]
        assert (
            approved[0] == "approve"
            and approved[1]["text"].startswith("use half2 bottleneck: memory bound")
            and approved[1]["edited_by"] == "human"
        )
        await pilot.press("s")
        await _settle(app, pilot)
        await pilot.press("r", *"too risky", "enter")
        await _settle(app, pilot)
        assert loops[0].calls[-1] == ("reject", "too risky")
    repo.close()


async def test_approval_policy_from_the_palette_goes_to_the_loop(session_root) -> None:
    """The palette's policy is handed to the loop, which alone decides (and records who did): when
    the loop still asks, the workbench asks the human rather than approving on a policy's behalf."""
    app, repo, loops = _live_app(session_root, flagged=False)
    messages: list = []
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.pause()
        assert loops[0].policies == ["ask"]  # the configured default, given when the loop attached
        await pilot.press("ctrl+p")
        await pilot.press(*"Approval policy: auto")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.approval_policy == "auto" and loops[0].policies == ["ask", "auto"]
        loops[0].gate.set()
        await pilot.press("s")
        await _settle(app, pilot)
        assert isinstance(app.screen, ApprovalScreen)  # this loop asked, so a human answers
        assert not [d for d in messages if isinstance(d, ApprovalDecided)]
    from tui.settings import load_settings

    assert load_settings().approval_policy == "auto"  # remembered
    repo.close()


async def test_edit_mode_hands_a_human_version_to_the_loop(session_root) -> None:
    app, repo, loops = _live_app(session_root)
    messages: list = []
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.press("e")
        pane = app.screen.query_one(KernelPane)
        assert pane.editing and not pane.text_area.read_only
        await pilot.press(*"# tuned by hand")
        await pilot.press("ctrl+s", "y")  # the check refuses the fixture: hand it over all the same
        await _settle(app, pilot)
        assert not pane.editing and pane.text_area.read_only
        await pilot.press("e", "escape")  # escape cancels without handing anything over
        await _settle(app, pilot)
    sent = [c for c in loops[0].calls if c[0] == "edit_kernel"]
    assert len(sent) == 1 and sent[0][1].startswith("# tuned by handimport torch")
    assert [m.source for m in messages if isinstance(m, KernelEdited)] == [sent[0][1]]
    repo.close()


async def test_external_editor_result_goes_to_the_loop(session_root, tmp_path, monkeypatch) -> None:
    editor = tmp_path / "fake-editor.sh"
    editor.write_text('#!/bin/sh\necho "# from EDITOR" >> "$1"\n')
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    app, repo, loops = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+e")
        await pilot.pause()
        await pilot.press("y")  # the check refuses the fixture: hand it over all the same
        await _settle(app, pilot)
        assert app.screen.query_one(KernelPane).source.endswith("# from EDITOR\n")
    sent = [c for c in loops[0].calls if c[0] == "edit_kernel"]
    assert len(sent) == 1 and sent[0][1].endswith("# from EDITOR\n")
    repo.close()


async def test_streamed_tokens_show_before_the_reply_finishes(session_root) -> None:
    app, repo, _ = _live_app(session_root)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        screen.adapter.on_event(ev.LLMToken(role="coder", text="Writing a **tiled** "))
        screen.adapter.on_event(ev.LLMToken(role="coder", text="kernel"))
        await pilot.pause(0.3)
        assert "Writing a tiled" in " ".join(screen_text(app).split())  # rendered Markdown, reply not over
        screen.adapter.on_event(
            ev.LLMReply(
                role="coder", model="openai/o3", text="Done.", input_tokens=5, output_tokens=7, cost_usd=0.001
            )
        )
        screen.adapter.on_event(ev.LoopError(stage="coder", message="rate limited"))
        await pilot.pause(0.3)
        assert "Coder · openai/o3 · 12 tok · $0.0010" in screen.query_one(ConversationPane).transcript_text()
        assert "error in coder" in screen_text(app)
    repo.close()
