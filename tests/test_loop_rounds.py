"""Raising a loop's round target at runtime (``Loop.add_rounds``), without any front end.

The TUI's ``+`` calls this; here the real loop runs on CPU with scripted agents and real
evaluations (cached builds) against a real session repo, so what is tested is what the key does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.loop.machine import FINISHED
from engine.loop.state import DONE, JUDGE
from sessions.repo import SessionRepo
from tests.loop_helpers import make_loop, new_session

pytestmark = pytest.mark.slow


def test_rounds_added_to_a_finished_loop_run_and_are_recorded(tmp_path: Path, ext_cache: Path) -> None:
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=0)
    assert loop.run() == FINISHED and [it.number for it in session.history()] == [0]
    assert loop.stage == DONE
    assert loop.add_rounds(1) == 1
    assert loop.stage == JUDGE and loop.options.rounds == 1  # finished no more: the next run goes on
    assert loop.run() == FINISHED
    history = session.history()
    assert [it.number for it in history] == [0, 1]
    # the new target is in session.toml, so `cudaforge open` / a reopened workbench keeps it
    assert session.settings()["settings"]["loop"]["rounds"] == 1

    # a branch made at the tip has nothing left to run; rounds added there run on the branch only
    name = loop.branch_from(1)
    assert loop.stage == DONE
    assert loop.add_rounds(1) == 2
    assert loop.run() == FINISHED
    assert [it.number for it in session.history(name)] == [0, 1, 2]
    assert [it.number for it in session.history("main")] == [0, 1]
    session.close()


def test_the_target_grows_from_the_larger_of_target_and_tip(tmp_path: Path, ext_cache: Path) -> None:
    """Rounds already planned are kept (target above the tip); a branch made below the target keeps
    its rounds to go and gains the added ones; nothing is run by adding."""
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=0)
    assert loop.run() == FINISHED
    assert loop.add_rounds(3) == 3  # tip 0: three rounds to go
    assert loop.add_rounds(2) == 5  # the target was already above the tip: it grows from there
    assert [it.number for it in session.history()] == [0]  # adding runs nothing
    with pytest.raises(ValueError):
        loop.add_rounds(0)
    assert loop.options.rounds == 5
    session.close()


def test_added_rounds_survive_a_restart_before_the_next_commit(tmp_path: Path, ext_cache: Path) -> None:
    """The TUI's + then a quit (or a crash) before anything is committed: the journal keeps the
    target, so the reopened loop still has the rounds to run (no evaluation needed to show it)."""
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, "steady", rounds=0)
    assert loop.run() == FINISHED
    assert loop.add_rounds(2) == 2
    session.close()  # the process ends here: nothing committed since the +
    reopened = SessionRepo.open(session.path)
    again = make_loop(reopened, ext_cache, "steady", rounds=0)  # started as the session was: rounds 0
    assert again.options.rounds == 2 and again.stage == JUDGE
    assert again.options.settings["loop"]["rounds"] == 2  # the next commit records it
    reopened.close()
