"""``cudaforge explore`` (engine/explore): K ideas from one iteration, a branch each, R rounds, beam, caps,
stop and resume. Real sessions, real CPU evaluations, the real scripted provider: the Judge's first
reply is three ranked ideas, and each branch's Coder has its own replies (tests/fixtures/scripted/explore)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.explore.plan import DONE, PRUNED, STOPPED, ExploreSpec, load_plan
from engine.explore.runner import BranchSummary, Choice, ExploreError, Explorer
from engine.llm.scripted import branch_model
from engine.loop.machine import FINISHED, PAUSED, Loop, LoopOptions
from engine.loop.state import GATE, Pending, read_journal, save_journal
from sessions import ranking
from sessions.repo import SessionRepo
from tests.conftest import python_path
from tests.loop_helpers import SCRIPTED, agents, fast_eval, make_loop, new_session

pytestmark = pytest.mark.slow

EXPLORE = SCRIPTED / "explore"


@pytest.fixture(scope="module")
def seeded_template(tmp_path_factory: pytest.TempPathFactory, ext_cache: Path) -> Path:
    """One session whose iteration 0 is a correct kernel, on main (evaluated once for the module)."""
    session = new_session(tmp_path_factory.mktemp("template"))
    loop = make_loop(session, ext_cache, coder_dir=EXPLORE / "coder", judge_dir=EXPLORE / "judge", rounds=0)
    assert loop.run() == FINISHED
    loop.close()
    assert [(it.number, it.status) for it in session.history()] == [(0, "correct")]
    session.close()
    return session.path


def seeded(tmp_path: Path, template: Path) -> SessionRepo:
    """A copy of the seeded session (a whole git repository, copied as a folder)."""
    target = tmp_path / "sessions" / template.name
    shutil.copytree(template, target)
    return SessionRepo.open(str(target))


def factory(cache: Path, calls: list[tuple[int, int]] | None = None, judge_dir: Path = EXPLORE / "judge") -> Any:
    """Loops as the command line makes them: one Coder and Judge per branch, kept over its rounds."""
    kept: dict[int, Any] = {}

    def make(session: SessionRepo, k: int, target: int, on_event: Any, branch: str) -> Loop:
        if calls is not None:
            calls.append((k, target))
        if k not in kept:
            coder = branch_model(f"scripted/{EXPLORE / 'coder'}", k).partition("/")[2]
            kept[k] = agents(Path(coder), judge_dir)
        coder, judge = kept[k]
        options = LoopOptions(rounds=target, eval_options=fast_eval(cache), settings={"loop": {"rounds": target}})
        return Loop(session, coder, judge, options, on_event=on_event, branch=branch)

    return make


def test_three_ideas_become_three_branches_of_two_rounds_each(tmp_path: Path, ext_cache: Path, seeded_template: Path) -> None:
    session = seeded(tmp_path, seeded_template)
    lines: list[str] = []
    explorer = Explorer(session, ExploreSpec(start=0, source="main", width=3, rounds=2), factory(ext_cache), lines.append)
    summary = explorer.run()
    assert summary.outcome == FINISHED and not summary.stopped
    assert session.current_branch == "main"  # where a later `cudaforge run --session` goes on
    root = session.history("main")[0]
    for k in (1, 2, 3):
        history = session.history(f"explore/0-{k}")
        assert [it.number for it in history] == [0, 1, 2]
        assert history[0].sha == root.sha  # every branch is a child of the start iteration
        assert all(it.correct for it in history)
    first = session.history("explore/0-1")[1]
    assert first.suggestion["approved"]["bottleneck"] == "the Python wrapper's overhead"
    assert first.suggestion["approved_by"] == "policy:auto"
    assert [r["role"] for r in first.transcript][:1] == ["judge"]  # the ideas call, committed once, here
    assert session.history("explore/0-2")[1].suggestion["approved"]["optimization_method"] == "a second pass to warm the cache"
    assert not any(r["role"] == "judge" for r in session.history("explore/0-2")[1].transcript)
    fsck = subprocess.run(["git", "-C", str(session.path), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert [b.state for b in summary.branches] == [DONE, DONE, DONE] and [b.rounds for b in summary.branches] == [2, 2, 2]
    # the summary names the fastest kernel by its own time when all ran on one device (sessions.ranking):
    # the speedups' reference times moved between workers, so the largest speedup may be another branch's
    if summary.ranked_by == ranking.KERNEL_TIME:
        best = min(summary.branches, key=lambda b: b.best_ms if b.best_ms is not None else float("inf"))
    else:
        best = max(summary.branches, key=lambda b: b.best_speedup or 0.0)
    assert summary.best is best and best.best_iteration in (1, 2)
    from engine.cli.explore import format_summary

    text = format_summary(summary, session.name)
    # the scripted kernels are the seed's with comments: whether the best beat the seed beyond both timings'
    # spread is this run's measurement, and the summary offers an export exactly when it did
    strongest = ranking.measured(best.name, session.history(best.name)[best.best_iteration])
    origin = ranking.measured("main", root)
    gained = ranking.beats(strongest, origin, ranking.ranked_by([strongest, origin]))
    assert summary.no_gain is not gained
    export = f"cudaforge export {session.name} --branch {best.name} --iteration {best.best_iteration}"
    if gained:
        assert f"best: {best.name} iteration {best.best_iteration}" in text and export in text
    else:
        assert "no branch beat iteration 0" in text and "cudaforge export" not in text
    assert any("explore/0-3: branch mispredictions" in line for line in lines)
    assert json.loads(json.dumps(summary.to_dict()))["best"]["branch"] == best.name

    def quartiles(branch: BranchSummary) -> tuple[float, float]:  # the best iteration's, as committed
        found = session.history(branch.name)[branch.best_iteration].read_json("eval.json")["timing"]["candidate"]
        return found["p25_ms"], found["p75_ms"]

    low, high = quartiles(best)
    for other in summary.branches:
        if other is not best:  # named beside the best exactly when their measured ranges overlap
            p25, p75 = quartiles(other)
            assert (other.name in summary.within_spread) == (p25 <= high and low <= p75)
    assert summary.to_dict()["best"]["within_spread"] == summary.within_spread
    session.close()


def test_a_person_picks_changes_and_adds_ideas_before_any_branch_is_made(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    """The workbench's chooser (tui/screens/explore.py) through the engine's API: the Judge's ideas are
    asked once and kept; only what the person chose becomes a branch, in their order, and each branch's
    first round records the person as the approver and the Judge's idea it changed."""
    session = seeded(tmp_path, seeded_template)
    explorer = Explorer(session, ExploreSpec(start=0, source="main", width=3, rounds=1), factory(ext_cache))
    ideas = explorer.propose()
    assert len(ideas) == 3 and not any(b.startswith("explore/0-2") for b in session.branches())
    assert explorer.propose() == ideas  # kept in the plan: never a second Judge call
    assert load_plan(session.path, 0).proposed == ideas
    with pytest.raises(ExploreError, match="no idea was chosen"):
        explorer.choose([])
    explorer.choose([Choice(ideas[2]), Choice.edited(ideas[0], "fuse the two launches into one"),
                     Choice.own("one block of 256 threads per row")])  # fmt: skip
    with pytest.raises(ExploreError, match="chosen already"):
        explorer.choose([Choice(ideas[1])])
    summary = explorer.run()
    assert summary.outcome == FINISHED and [b.rounds for b in summary.branches] == [1, 1, 1]
    records = {k: session.history(f"explore/0-{k}")[1].suggestion for k in (1, 2, 3)}
    assert records[1]["approved"] == ideas[2] and records[1]["approved_by"] == "human" and not records[1]["edited"]
    assert records[2]["proposed"] == ideas[0] and records[2]["edited"] and records[2]["approved_by"] == "human"
    assert records[2]["approved"]["text"] == "fuse the two launches into one"
    assert records[3]["approved"]["text"] == "one block of 256 threads per row" and records[3]["edited"]
    for k, text in ((2, "fuse the two launches into one"), (3, "one block of 256 threads per row")):
        [coder_call] = [r for r in session.history(f"explore/0-{k}")[1].transcript if r["role"] == "coder"]
        assert text in json.dumps(coder_call["messages"])  # what the Coder was asked to do
    assert [b.idea for b in summary.branches][2] == "one block of 256 threads per row"
    session.close()


def test_beam_1_prunes_the_slower_branches_after_round_1(tmp_path: Path, ext_cache: Path, seeded_template: Path) -> None:
    session = seeded(tmp_path, seeded_template)
    spec = ExploreSpec(start=0, source="main", width=3, rounds=2, beam=1)
    summary = Explorer(session, spec, factory(ext_cache)).run()
    speedups = {b.name: session.history(b.name)[1].speedup for b in summary.branches}
    # the beam ranks as sessions.ranking does: by the kernel's own time where every branch was timed on one
    # kind of device (here), so the kept branch is the fastest kernel, not always the largest speedup (each
    # branch's speedup has a reference timing of its own, and honest ReLUs come close)
    measured = {b.name: ranking.measured(b.name, session.history(b.name)[1]) for b in summary.branches}
    order = ranking.sort_key(ranking.ranked_by(list(measured.values())))
    kept = min(measured, key=lambda name: order(measured[name]))
    for b in summary.branches:
        if b.name == kept:
            assert b.state == DONE and b.rounds == 2
        else:  # recorded as pruned, with the reason and the speedup it had
            assert b.state == PRUNED and b.rounds == 1
            assert b.why.startswith("beam 1 after round 1: best ") and f"{speedups[b.name]:.2f}x" in b.why
    plan = load_plan(session.path, 0)
    assert plan is not None and sorted(b.state for b in plan.branches) == [DONE, PRUNED, PRUNED]
    session.close()


def test_a_stop_mid_exploration_then_the_same_exploration_again_finishes_every_branch(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    """The branches run side by side: a stop (as Ctrl-C) once the first of them commits lets each round
    in flight finish what it must and stops the rest; the same exploration again finishes every branch
    without asking for the ideas again or running a committed round twice."""
    from engine.events import IterationCommitted

    session = seeded(tmp_path, seeded_template)
    spec = ExploreSpec(start=0, source="main", width=2, rounds=2)
    explorer: Explorer

    def stop_at_first_commit(event: Any) -> None:
        if isinstance(event, IterationCommitted):
            explorer.stop()

    explorer = Explorer(session, spec, factory(ext_cache), on_event=stop_at_first_commit)
    first = explorer.run()
    assert first.outcome == PAUSED
    lengths = [len(session.history(f"explore/0-{k}")) for k in (1, 2)]
    assert max(lengths) == 2 and lengths != [3, 3]  # one round committed, the exploration unfinished
    calls: list[tuple[int, int]] = []
    again = Explorer(session, spec, factory(ext_cache, calls)).run()
    assert again.outcome == FINISHED and [b.rounds for b in again.branches] == [2, 2]
    assert all(k > 0 for k, _ in calls)  # the ideas were not asked for again
    for k in (1, 2):  # each iteration committed once, in order
        assert [it.number for it in session.history(f"explore/0-{k}")] == [0, 1, 2]
    assert sum(r["role"] == "judge" for it in session.history("explore/0-1") for r in it.transcript) == 2
    session.close()


def test_a_resume_must_explore_the_same_way_and_a_missing_iteration_is_refused(tmp_path: Path, ext_cache: Path, seeded_template: Path) -> None:
    session = seeded(tmp_path, seeded_template)
    with pytest.raises(ExploreError, match="has no iteration 4"):
        Explorer(session, ExploreSpec(start=4, source="main", width=2, rounds=1), factory(ext_cache))
    on_line, holder = _stop_when("explore/0-1: round 1")  # the ideas asked for and the branches made
    holder.append(Explorer(session, ExploreSpec(start=0, source="main", width=2, rounds=1), factory(ext_cache), on_line))
    assert holder[0].run().outcome == PAUSED and holder[0].plan.asked
    with pytest.raises(ExploreError, match="resume with --branch main --width 2"):
        Explorer(session, ExploreSpec(start=0, source="main", width=3, rounds=1), factory(ext_cache))
    # an unfinished round on another branch (a suggestion awaiting approval) is not dropped by exploring:
    # the exploration's branches keep journals of their own
    tip = session.history("main")[0]
    save_journal(session, Pending(branch="main", base=tip.sha, stage=GATE, phase="optimize", suggestion={"text": "x"}))
    summary = Explorer(session, ExploreSpec(start=0, source="main", width=2, rounds=1), factory(ext_cache)).run()
    assert summary.outcome == FINISHED and [b.rounds for b in summary.branches] == [1, 1]
    assert read_journal(session)[0].stage == GATE and read_journal(session)[0].branch == "main"
    session.close()


def test_the_cost_cap_stops_the_exploration_and_the_summary_says_so(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    """The command line, with a priced Judge on a local OpenAI-compatible server: its ideas call alone
    costs more than the cap, so no branch starts a round, and the summary counts what was spent."""
    from tests.fake_llm_server import CHAT, FakeLLMServer, FakeResponse, chat_sse

    session = seeded(tmp_path, seeded_template)
    session.close()
    cwd = tmp_path / "project"  # its cudaforge.toml prices the Judge: $1,000 per million tokens
    cwd.mkdir()
    (cwd / "cudaforge.toml").write_text('[prices."openai/local-judge"]\ninput = 1000.0\noutput = 1000.0\n')
    ideas = (EXPLORE / "judge" / "01_ideas.md").read_text()
    env = {**os.environ, "PYTHONPATH": python_path(), "OPENAI_BASE_URL": "", "OPENAI_API_KEY": "local-placeholder",
           "CUDAFORGE_CACHE_DIR": str(ext_cache)}  # fmt: skip
    with FakeLLMServer() as server:
        server.enqueue(CHAT, FakeResponse(sse=chat_sse([ideas], prompt_tokens=900, completion_tokens=100)))
        env["OPENAI_BASE_URL"] = server.openai_base_url
        done = subprocess.run(
            [sys.executable, "-m", "tui.cli", "explore", str(session.path), "--width", "3", "--rounds", "2",
             "--max-cost", "0.5", "--device", "cpu", "--coder", f"scripted/{EXPLORE / 'coder'}",
             "--judge", "openai/local-judge", "--json", str(tmp_path / "summary.json")],
            capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
        )  # fmt: skip
        assert len(server.requests) == 1  # the ideas; no branch got further
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped early: the cost cap $0.5 was reached ($1.0000 spent)" in done.stdout
    assert "total: 1000 tokens · $1.0000" in done.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [b["rounds"] for b in summary["branches"]] == [0, 0, 0] and summary["best"] is None
    assert [b["state"] for b in summary["branches"]] == [STOPPED, STOPPED, STOPPED]
    assert summary["cost_usd"] == pytest.approx(1.0) == summary["uncommitted_usd"]
    plan = load_plan(session.path, 0)  # the ideas call is kept with the exploration: nothing is lost
    assert plan is not None and plan.ideas_record["cost_usd"] == pytest.approx(1.0)


def test_a_scripted_model_gives_each_branch_its_own_replies_where_it_has_a_folder(tmp_path: Path) -> None:
    (tmp_path / "branch-2").mkdir()
    model = f"scripted/{tmp_path}"
    assert branch_model(model, 2) == f"scripted/{tmp_path / 'branch-2'}"
    assert branch_model(model, 1) == model and branch_model(model, 0) == model  # no folder; the ideas call
    assert branch_model("openai/o3", 2) == "openai/o3"


def test_a_resume_tries_failed_and_stopped_branches_again_and_keeps_what_the_beam_cut(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    """As a single branch: run again after an error or a cap and it goes on; a finished branch short of
    the rounds now asked for goes on; a pruned branch stays pruned. (The plan is edited as earlier runs
    would have left it.)"""
    from engine.explore.plan import FAILED, RUNNING, BranchState, save_plan

    session = seeded(tmp_path, seeded_template)
    spec = ExploreSpec(start=0, source="main", width=4, rounds=1)
    explorer = Explorer(session, spec, factory(ext_cache))
    for k in (1, 2, 3, 4):
        session.branch_from(0, name=f"explore/0-{k}", branch="main")
    explorer.plan.asked, explorer.plan.stopped = True, "the cost cap $1 was reached"
    explorer.plan.branches = [
        BranchState("explore/0-1", {"mode": "optimize"}, FAILED, "rate limited"),
        BranchState("explore/0-2", {"mode": "optimize"}, STOPPED, "the cost cap $1 was reached"),
        BranchState("explore/0-3", {"mode": "optimize"}, DONE),
        BranchState("explore/0-4", {"mode": "optimize"}, PRUNED, "beam 1 after round 1"),
    ]
    save_plan(session.path, explorer.plan)
    resumed = Explorer(session, ExploreSpec(start=0, source="main", width=4, rounds=2), factory(ext_cache))
    assert [b.state for b in resumed.plan.branches] == [RUNNING, RUNNING, RUNNING, PRUNED]
    assert resumed.plan.stopped == "" and resumed.plan.branches[3].why == "beam 1 after round 1"
    session.close()


def _stop_when(prefix: str) -> tuple[Any, list[Explorer]]:
    """An on_line that stops the explorer once a line starts with ``prefix`` (set the explorer after)."""
    holder: list[Explorer] = []

    def on_line(line: str) -> None:
        if line.startswith(prefix):
            holder[0].stop()

    return on_line, holder


def test_a_branchs_unfinished_round_survives_another_branch_running_first(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    """The session has one loop journal. Branch 2's round, left unfinished by a kill, must not be
    overwritten when branch 1 takes its turn first on the resume."""
    session = seeded(tmp_path, seeded_template)
    spec = ExploreSpec(start=0, source="main", width=2, rounds=1)
    on_line, holder = _stop_when("explore/0-1: round 1")
    holder.append(Explorer(session, spec, factory(ext_cache), on_line))
    assert holder[0].run().outcome == PAUSED  # the ideas asked for and the branches made; no round ran
    assert session.current_branch == "main" and [len(session.history(f"explore/0-{k}")) for k in (1, 2)] == [1, 1]
    marker = {"mode": "optimize", "bottleneck": "MARKER: the round a kill left", "optimization_method": "resume it"}
    tip = session.history("explore/0-2")[-1]  # as a kill mid-round leaves it: HEAD on the branch, a journal
    save_journal(session, Pending(branch="explore/0-2", base=tip.sha, stage="coder", phase="optimize",
                                  suggestion=marker, approved=marker, approved_by="policy:auto"))  # fmt: skip
    session.switch_branch("explore/0-2")
    from engine.explore.plan import plan_of_branch

    left = plan_of_branch(session.path, session.current_branch)  # how the command finds the source again
    assert left is not None and left.spec.source == "main" and plan_of_branch(session.path, "main") is None
    summary = Explorer(session, spec, factory(ext_cache)).run()
    assert summary.outcome == FINISHED and [b.rounds for b in summary.branches] == [1, 1]
    assert session.history("explore/0-1")[1].suggestion["approved"]["bottleneck"] == "the Python wrapper's overhead"
    assert session.history("explore/0-2")[1].suggestion["approved"]["bottleneck"] == marker["bottleneck"]
    assert read_journal(session)[0] is None and session.current_branch == "main"
    session.close()


def test_fewer_ideas_than_asked_make_fewer_branches_and_an_empty_reply_makes_none(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    session = seeded(tmp_path, seeded_template)
    empty = tmp_path / "empty-judge"
    empty.mkdir()
    (empty / "01.md").write_text("")
    with pytest.raises(ExploreError, match="held no idea"):
        Explorer(session, ExploreSpec(start=0, source="main", width=3, rounds=1), factory(ext_cache, judge_dir=empty)).run()
    plan = load_plan(session.path, 0)
    assert plan is not None and not plan.asked and plan.branches == []
    two = tmp_path / "two-ideas"
    two.mkdir()
    ideas = json.loads((EXPLORE / "judge" / "01_ideas.md").read_text().split("```json")[1].split("```")[0])
    (two / "01.md").write_text(json.dumps(ideas[:2]))
    lines: list[str] = []
    on_line, holder = _stop_when("explore/0-1: round 1")
    # nothing was made by the empty try, so another width is taken rather than refused
    holder.append(Explorer(session, ExploreSpec(start=0, source="main", width=4, rounds=1),
                           factory(ext_cache, judge_dir=two), lambda line: (lines.append(line), on_line(line))))  # fmt: skip
    holder[0].run()
    assert [b.name for b in holder[0].plan.branches] == ["explore/0-1", "explore/0-2"]
    assert "the Judge gave 2 different idea(s), not 4" in lines
    session.close()


def _wait_for(condition: Any, timeout: float = 60.0) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_a_person_at_every_gate_approves_edits_and_rejects_each_branchs_suggestions(
    tmp_path: Path, ext_cache: Path, seeded_template: Path
) -> None:
    """``gated`` (the workbench's step): from round 2 on, each branch waits at its gate while the others
    go on; the person's approval, edit or rejection is what the branch's round records. A stop while a
    branch waits leaves it at its gate (its rejections kept) for the resume, and letting go
    (``set_gated(False)``) approves as the Judge said."""
    import threading

    session = seeded(tmp_path, seeded_template)
    spec = ExploreSpec(start=0, source="main", width=2, rounds=2)
    gates: list[str] = []
    explorer = Explorer(session, spec, factory(ext_cache), gated=True, on_gate=gates.append)
    outcome: list[Any] = []
    runner = threading.Thread(target=lambda: outcome.append(explorer.run()))
    runner.start()
    waiting = _wait_for(lambda: len(explorer.awaiting()) == 2 and explorer.awaiting())
    assert [name for name, _ in waiting] == ["explore/0-1", "explore/0-2"]
    assert all(len(session.history(f"explore/0-{k}")) == 2 for k in (1, 2))  # round 1 ran unasked
    with pytest.raises(ExploreError, match="not waiting"):
        explorer.approve("main")
    explorer.approve("explore/0-1", "unroll the loop by four")
    explorer.reject("explore/0-2", "that was tried on branch 1")
    _wait_for(lambda: gates.count("explore/0-2") == 2)  # its Judge asked again: waiting again
    _wait_for(lambda: len(session.history("explore/0-1")) == 3)
    explorer.stop()
    runner.join(60)
    assert outcome[0].outcome == PAUSED and len(session.history("explore/0-2")) == 2
    edited = session.history("explore/0-1")[2].suggestion
    assert edited["approved_by"] == "human" and edited["edited"] and edited["approved"]["text"] == "unroll the loop by four"
    again = Explorer(session, spec, factory(ext_cache), gated=True)
    rerun: list[Any] = []
    runner = threading.Thread(target=lambda: rerun.append(again.run()))
    runner.start()
    assert [name for name, _ in _wait_for(again.awaiting)] == ["explore/0-2"]  # the resume asks again
    again.set_gated(False)
    runner.join(60)
    assert rerun[0].outcome == FINISHED and [b.rounds for b in rerun[0].branches] == [2, 2]
    second = session.history("explore/0-2")[2].suggestion
    assert second["approved_by"] == "policy:auto"
    assert [r["note"] for r in second["rejected"]] == ["that was tried on branch 1"]
    session.close()
