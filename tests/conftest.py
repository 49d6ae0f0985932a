"""Shared test setup: the ``gpu`` marker skips without CUDA; extension builds share one cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Fixtures for a group of tests, kept out of this file; pytest finds them by name, no import needed.
pytest_plugins = ["tests.tui_plugin"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

# Precompiled torch headers are used where made, and made only where a test asks (EvalOptions.make_pch):
# most tests build once in a fresh cache, where a ~50 s header compile would never be used and only takes
# a core from the other tests. The shared cache gets its header once, up front (``ext_cache``). Set here,
# before any test starts, so every subprocess inherits it.
os.environ.setdefault("CUDAFORGE_PCH", "use")
# One inductor cache for the run: the torch.compile baselines of the eval and bench tests compile the
# same small graphs; each test's own cache compiled them again (C++ through g++, ~10 s apiece).
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(REPO / ".cache" / "test-inductor"))


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
    root = Path(os.environ.get("CUDAFORGE_TEST_CACHE", REPO / ".cache" / "test-extensions"))
    root.mkdir(parents=True, exist_ok=True)
    _make_shared_header(root)
    return root


def _make_shared_header(root: Path) -> None:
    """The torch header of the test kernels' flag set (``-O3``, CPU) in the shared cache, made once.

    Why: a CPU build's binding spends ~30 s of g++ parsing ``torch/extension.h`` on these 2 cores, and
    the suite's loop and evaluator tests make dozens such builds, compile errors included (never cached).
    With the header each takes a few seconds, as on a GPU box after its first build. One xdist worker
    makes it (an exclusive lock, not waited for); the other goes on and its builds use it once ready.
    """
    import fcntl

    from engine.eval.build.pch import HeaderStore, header_key

    if HeaderStore(root).ready(header_key({"extra_cflags": ["-O3"]}, False)):
        return
    lock = open(root / "shared-header.lock", "w")  # noqa: SIM115 - held while the header is made
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return
    try:
        from engine.eval.build import makers
        from engine.eval.evaluate import evaluate
        from engine.eval.options import EvalOptions

        options = EvalOptions(device="cpu", cache_root=root, do_timing=False, use_pch=True, make_pch=True)
        task, kernel = EXAMPLES / "tasks" / "relu.py", EXAMPLES / "kernels" / "relu_cpu.py"
        evaluate(task.read_text(), kernel.read_text(), options)  # its build's command makes the header
        makers.wait(600)
    finally:
        lock.close()


def python_path() -> str:
    """PYTHONPATH for a subprocess running this checkout: the repo first, then whatever the caller had
    (on the GPU machine the project's other dependencies come from a PYTHONPATH folder of wheels)."""
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
