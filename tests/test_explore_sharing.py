"""How an exploration's branches share the machine (engine/explore/devices.py, engine/llm/bounded.py) and
keep their own journals (engine/loop/state.py): real threads, a real scripted provider, real files."""

from __future__ import annotations

import threading
from pathlib import Path

from engine.explore.devices import CHECK, PROFILE, TIME, SharedDevices
from engine.llm.base import LLMRequest, Message
from engine.llm.bounded import ProviderBounds
from engine.llm.scripted import ScriptedProvider
from engine.loop.state import JOURNAL_NAME, Pending, journal_path, read_journal, save_journal
from tests.conftest import until
from tests.loop_helpers import new_session


def test_a_timing_holds_its_gpu_alone_while_checks_share_it() -> None:
    devices = SharedDevices("cuda", [0], budget_bytes=10 << 30)
    order: list[str] = []
    timing_in = threading.Event()
    let_timing_go = threading.Event()

    def timing() -> None:
        with devices._hold("explore/0-1", TIME):
            order.append("time in")
            timing_in.set()
            let_timing_go.wait(5)
            order.append("time out")

    def check() -> None:
        with devices._hold("explore/0-2", CHECK, need=1 << 30):
            order.append("check in")

    first = threading.Thread(target=timing)
    first.start()
    assert timing_in.wait(5)
    second = threading.Thread(target=check)
    second.start()
    assert until(lambda: devices.pool.waiting == 1)  # the check is waiting for room: the pool says so
    assert order == ["time in"]  # the check waits for the timing to end
    let_timing_go.set()
    first.join(5)
    second.join(5)
    assert order == ["time in", "time out", "check in"]
    assert devices.overlaps() == [] and devices.stats()["alone_overlaps"] == 0


def test_checks_run_side_by_side_within_the_budget_and_overlaps_are_found() -> None:
    devices = SharedDevices("cuda", [0], budget_bytes=3 << 30)
    inside = threading.Barrier(2, timeout=5)

    def check(branch: str) -> None:
        with devices._hold(branch, CHECK, need=1 << 30):
            inside.wait()  # both inside at once, or the barrier breaks

    threads = [threading.Thread(target=check, args=(f"explore/0-{k}",)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert not inside.broken and len(devices.windows) == 2
    assert devices.overlaps() == []  # two checks may share a GPU
    # a profile recorded as running beside a check on one GPU is what overlaps() must report
    from engine.explore.devices import Window

    a = devices.windows[0]
    devices._record(Window("explore/0-3", PROFILE, a.gpu, a.started_at, a.finished_at, alone=True))
    assert len(devices.overlaps()) >= 1


def test_the_cpu_is_one_slot_and_gpus_need_cuda() -> None:
    import pytest

    with pytest.raises(ValueError, match="GPUs were named"):
        SharedDevices("cpu", [0, 1])
    devices = SharedDevices("cpu")
    with devices._hold("explore/0-1", TIME) as where:
        assert where is None
    assert devices.stats()["gpus"] == [] and devices.stats()["seconds_by_part"][TIME] >= 0


def test_llm_calls_wait_for_their_providers_bound(tmp_path: Path) -> None:
    (tmp_path / "01.md").write_text("".join(f"line {i}\n" for i in range(20)))
    request = LLMRequest(system="", messages=[Message("user", "hi")])
    for bound, calls in ((1, 3), (3, 3)):
        bounds = ProviderBounds(bound)
        providers = [bounds.wrap(ScriptedProvider(str(tmp_path), chunk_delay_s=0.01)) for _ in range(calls)]
        threads = [threading.Thread(target=p.complete, args=(request,)) for p in providers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert bounds.peak == {"scripted": bound}  # never more than the bound; up to it when asked
        assert all(p.calls == 1 for p in providers)  # the wrapped provider's own attributes show through


def test_an_exploration_branch_keeps_its_own_journal(tmp_path: Path) -> None:
    session = new_session(tmp_path)
    base = session.root_sha
    save_journal(session, Pending(branch="main", base=base, stage="judge", phase="optimize"))
    save_journal(session, Pending(branch="explore/0-1", base=base, stage="coder", phase="optimize"))
    save_journal(session, Pending(branch="explore/0-2", base=base, stage="evaluate", phase="optimize", kernel="k"))
    assert journal_path(session).name == JOURNAL_NAME
    assert len({journal_path(session, b) for b in ("main", "explore/0-1", "explore/0-2")}) == 3
    assert read_journal(session)[0].stage == "judge"
    assert read_journal(session, "explore/0-1")[0].stage == "coder"
    assert read_journal(session, "explore/0-2")[0].kernel == "k"
    session.close()
