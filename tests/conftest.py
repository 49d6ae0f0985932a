"""Shared test setup: the ``gpu`` marker skips without CUDA; extension builds share one cache."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.make_headers import shared_cache

# Fixtures for a group of tests, kept out of this file; pytest finds them by name, no import needed.
pytest_plugins = ["tests.tui_plugin"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

# Precompiled torch headers are used where made already and never made during the run (EvalOptions.make_pch)
# unless a test asks (tests/test_build_pch.py): most tests build once in a fresh cache, where the ~50 s
# header compile would never be used and only takes a core from the other tests (7 such compiles, ~230 s,
# in one full run on the 2-core CI machine). CI makes the shared cache's headers before the tests
# (``python -m tests.make_headers``). Set here, before any test starts, so every subprocess inherits it.
os.environ.setdefault("CUDAFORGE_PCH", "use")
# One inductor cache for the run: the torch.compile baselines of the eval and bench tests compile the
# same small graphs; each test's own cache compiled them again (C++ through g++, ~10 s apiece).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(REPO / ".cache" / "test-inductor"))
# Fork servers are not kept past the process that started them (engine.eval.keptserver): most tests use a
# build cache of their own, so each would leave a server with torch imported for minutes (kept for 15 s
# instead, the full run took 13 min 34 s against 12 min 4 s: no server was shared enough to pay). The
# tests of kept servers (tests/test_keptserver.py) set it for the commands they run.
os.environ["CUDAFORGE_KEEP_SERVER_S"] = "0"
# Bytecode is written for this checkout's modules: the run starts several hundred Python processes (CLI
# commands, fork servers, workers, the xdist workers' collection), and under PYTHONDONTWRITEBYTECODE (set
# on some machines, this development machine among them) each compiled cudaforge's sources and rewrote the
# test modules anew. The xdist workers and every subprocess start after this line and inherit it.
# __pycache__ is git-ignored; benchmarks/mutants.py gives each of its runs a bytecode folder of its own.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ext_cache() -> Path:
    """One build cache for the whole run (and across xdist workers), so each extension builds once.

    Builds of the same source from several workers meet on the build directory's lock, which is
    part of what the evaluator promises. ``CUDAFORGE_TEST_CACHE`` overrides the location.
    """
    root = shared_cache()
    root.mkdir(parents=True, exist_ok=True)
    return root


def with_run_headers(root: Path) -> Path:
    """``root``, a build cache of a test's own, given the run's precompiled torch headers (``python -m
    tests.make_headers`` makes them in the shared cache before the tests, as CI does): each ready set's
    stub copied, its header linked, so a test that sets one aside takes it from no other test. A test
    whose cache must be new for its builds, not for torch's headers, then compiles its binding as a
    user's second build does (a flag-less binding: about 25 s of g++ on 2 cores without the header, 5 s
    with it). Where the run made none, ``root`` is left as it was (the same outcome, slower)."""
    from engine.eval.build.pch import FORMAT_MARKER, HeaderStore

    shared, store = HeaderStore(shared_cache()), HeaderStore(root)
    for made in sorted(shared.root.glob("*/torch/extension.h.gch")) if shared.root.is_dir() else []:
        key = made.parent.parent.name
        if not shared.ready(key) or store.folder(key).exists():
            continue
        torch_dir = store.folder(key) / "torch"
        torch_dir.mkdir(parents=True)
        (store.folder(key) / FORMAT_MARKER).touch()
        (torch_dir / "extension.h").write_bytes((made.parent / "extension.h").read_bytes())
        (torch_dir / "extension.h.gch").symlink_to(made.resolve())
    return root


def python_path() -> str:
    """PYTHONPATH for a subprocess running this checkout: the repo first, then whatever the caller had
    (on the GPU machine the project's other dependencies come from a PYTHONPATH folder of wheels)."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))


def until(condition: Callable[[], bool], seconds: float = 60.0, poll_s: float = 0.01) -> bool:
    """True once ``condition`` holds; False if it never does within ``seconds`` (a bound for a loaded
    machine, never a claim about speed). Tests wait on a state the code exposes, not on a sleep."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll_s)
    return condition()


def _kept_servers_started_since(started: float) -> list[int]:
    """Kept fork servers (engine.eval.keptserver) of this interpreter started after ``started`` (seconds
    since the epoch): what a command the run started with an environment of its own left behind."""
    boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] != [b"-m", b"engine.eval.zygote"] or argv[0] != sys.executable.encode():
                continue
            if b"CUDAFORGE_FORKSERVER_LISTEN_FD=" not in (entry / "environ").read_bytes():
                continue
            stat = (entry / "stat").read_text()
            began = boot + int(stat[stat.rindex(")") + 2 :].split()[19]) / ticks
        except (OSError, ValueError, IndexError):
            continue
        if began >= started - 1:
            found.append(int(entry.name))
    return found


_RUN_STARTED = time.time()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The run's last step (the xdist controller's, or the only process's): end the kept servers the
    run's commands left, so a test whose command had an environment of its own (no
    CUDAFORGE_KEEP_SERVER_S) does not leave a server with torch imported for ten minutes."""
    if hasattr(session.config, "workerinput"):
        return
    from engine.procgroups import kill_tree

    for pid in _kept_servers_started_since(_RUN_STARTED):
        kill_tree(pid)
