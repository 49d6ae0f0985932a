"""Long work shows itself (engine/cli/heartbeat.py): each running branch's stage and time, on a heartbeat."""

from __future__ import annotations

import re

from engine.cli.heartbeat import Heartbeat
from engine.events import LoopFinished, StageStarted
from tests.conftest import until


def test_each_running_branch_is_said_with_its_stage_and_time_until_it_finishes() -> None:
    said: list[str] = []
    beat = Heartbeat(said.append, every_s=0.05)
    beat.on_event(StageStarted(branch="explore/0-1", stage="coder"))
    beat.on_event(StageStarted(branch="explore/0-2", stage="build"))
    beat.on_event(StageStarted(branch="explore/0-1", stage="evaluate"))  # its latest stage is the one said
    assert until(lambda: beat.beats >= 1)
    beat.on_event(LoopFinished(branch="explore/0-2"))
    beats = beat.beats
    assert until(lambda: beat.beats > beats + 1)
    beat.stop()
    assert re.fullmatch(r"\[explore/0-1\] still evaluate · \d+m\d\ds", said[0]), said
    assert any(line.startswith("[explore/0-2] still build") for line in said)
    ones, twos = (sum(line.startswith(f"[explore/0-{k}]") for line in said) for k in (1, 2))
    assert twos < ones and said[-1].startswith("[explore/0-1]")  # the finished branch is no longer said
