"""Precompiled headers asked for by the worker and made by the evaluating process (engine/eval/build/makers.py).

The real header (a minute of g++ on torch's headers) is made in tests/test_build_pch.py; here the
make script is a stand-in, so the orchestration is tested in seconds: the worker's request starts
nothing, the evaluating process starts one maker per request in the sandbox, and a maker that does not
finish leaves the request to be made again.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from engine import sandbox
from engine.eval.build import makers
from engine.eval.build.pch import CLAIM, MAKE_SCRIPT, QUEUED, QUEUED_STALE_S, HeaderStore, _making_recently


def _asked_for(cache: Path, key: str, script: str) -> Path:
    """A header request as ``HeaderStore.queue`` leaves it, with ``script`` as its command."""
    folder = HeaderStore(cache).folder(key)
    (folder / "torch").mkdir(parents=True)
    (folder / MAKE_SCRIPT).write_text(script)
    (folder / "making").write_text(QUEUED)
    return folder


def test_the_worker_asks_for_a_header_and_starts_nothing(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text("cxx = c++\ncflags = -DTORCH_EXTENSION_NAME=e -fPIC\npost_cflags = -std=c++17\n")
    store = HeaderStore(tmp_path / "cache")
    assert store.queue("k1", build) is True
    folder = store.folder("k1")
    script = (folder / MAKE_SCRIPT).read_text()
    assert script.startswith("c++ -x c++-header ") and "-DTORCH_EXTENSION_NAME" not in script
    assert "extension.h.gch.tmp" in script and (folder / "making").read_text() == QUEUED
    assert store.queued() == ["k1"] and not makers.running()
    assert store.queue("k1", build) is False  # asked for once
    old = time.time() - QUEUED_STALE_S - 5
    os.utime(folder / "making", (old, old))
    assert not _making_recently(folder / "making")  # a request nobody started goes stale: asked again


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_the_evaluating_process_makes_each_request_once_in_the_sandbox(tmp_path: Path, mode: str) -> None:
    cache = tmp_path / "cache"
    folder = _asked_for(
        cache, "k2",
        'sleep 1\necho "${CUDAFORGE_SANDBOX:-none}" > torch/extension.h.gch\nrm -f making maker.claim\n',
    )  # fmt: skip
    assert makers.start_queued(cache, mode) == ["k2"]
    assert (folder / "making").read_text().startswith("making ") and (folder / CLAIM).exists()
    assert makers.start_queued(cache, mode) == []  # claimed: a second evaluation does not start another
    assert folder in makers.running()
    assert makers.wait(timeout_s=30)
    confined = (folder / "torch" / "extension.h.gch").read_text().strip()
    assert confined == ("none" if mode == "off" else sandbox.resolve_mode("auto"))
    assert not (folder / "making").exists() and not (folder / CLAIM).exists()


def test_a_maker_that_does_not_finish_leaves_the_request_to_be_made_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    folder = _asked_for(cache, "k3", "sleep 60\n")
    assert makers.start_queued(cache, "off") == ["k3"]
    makers._stop_at_exit()  # what the evaluating process does when it exits first
    assert not makers.running() and not (folder / CLAIM).exists() and not (folder / "making").exists()
    assert not HeaderStore(cache).ready("k3")


def test_a_maker_started_from_a_thread_that_ends_still_makes_the_header(tmp_path: Path) -> None:
    """The workbench, evalset, bench and the round benchmark evaluate on threads that end. bwrap's
    ``--die-with-parent`` kills a process when the thread that started it exits: makers started from such
    a thread were all killed (on the H200, the flag-less header of a 10-kernel run was never made)."""
    if sandbox.resolve_mode("auto") != "bwrap":
        pytest.skip("bwrap cannot run here: the parent-death signal is bwrap's")
    cache = tmp_path / "cache"
    folder = _asked_for(cache, "k4", "sleep 3\necho made > torch/extension.h.gch\nrm -f making maker.claim\n")

    def an_evaluation_thread() -> None:
        assert makers.start_queued(cache, "auto") == ["k4"]
        time.sleep(1.5)  # bwrap is up (its parent-death signal armed) before the thread ends

    thread = threading.Thread(target=an_evaluation_thread)
    thread.start()
    thread.join()
    assert makers.wait(timeout_s=30)
    assert (folder / "torch" / "extension.h.gch").read_text().strip() == "made"
    assert not (folder / "making").exists()


def test_a_maker_killed_before_it_cleaned_up_is_asked_for_again_at_once(tmp_path: Path) -> None:
    """Its ``making`` marker names a process of this host that is gone, so it no longer blocks the header
    for half an hour: the next build asks again and the next evaluation starts it."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text("cxx = sh -c 'sleep 60' maker\ncflags = -fPIC\n")  # a maker that hangs
    cache = tmp_path / "cache"
    store = HeaderStore(cache)
    assert store.queue("k5", build) is True
    assert makers.start_queued(cache, "off") == ["k5"]
    folder = store.folder("k5")
    (process,) = [p for p, f in makers._MAKERS if f == folder and p.poll() is None]
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert (folder / "making").read_text().split()[:2] == ["making", str(process.pid)]  # left behind
    assert (folder / CLAIM).exists()
    assert not store.pending("k5")
    assert store.queue("k5", build) is True  # asked for again, the dead maker's claim given up
    assert makers.start_queued(cache, "off") == ["k5"]
    assert store.pending("k5")
    makers._stop_at_exit()
    assert not (folder / "making").exists() and not (folder / CLAIM).exists()


def test_use_mode_builds_with_headers_made_already_and_asks_for_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CUDAFORGE_PCH=use`` (the test suite's setting, for a box whose cores are better spent elsewhere): a
    build finished without a header asks for none, where the default asks for one."""
    import io

    from engine.eval.build.extension import BuildRecorder, _Prepared
    from engine.eval.options import EvalOptions
    from engine.eval.result import ExtensionBuild

    for value, use, make in (("use", True, False), ("0", False, False), ("1", True, True)):
        monkeypatch.setenv("CUDAFORGE_PCH", value)
        options = EvalOptions()
        assert (options.use_pch, options.make_pch) == (use, make), value
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text("cxx = c++\ncflags = -fPIC\npost_cflags = -std=c++17\n")
    for make, said in ((False, ""), (True, "queued")):
        cache = tmp_path / f"cache-{make}"
        recorder = BuildRecorder(cache, use_pch=True, make_pch=make)
        record = ExtensionBuild(name="e", build_dir=str(build), cached=False, seconds=0.0, path="cpp")
        recorder._finish(record, _Prepared(build, {}, record, "k6", io.StringIO(), time.monotonic(), {}))
        assert record.pch == said
        assert HeaderStore(cache).queued() == (["k6"] if make else [])
