"""Make the precompiled torch headers of the test kernels' flag sets in the shared test cache, once.

    python -m tests.make_headers

Why: a CPU test kernel's binding spends ~30 s of g++ parsing ``torch/extension.h`` on a 2-core machine, and
the loop and evaluator tests build dozens of them. Compile errors are never cached, so each one is built
again. With the header, a build takes a few seconds, as on a GPU box after its first build. The tests
only use headers made already (``CUDAFORGE_PCH=use`` in conftest.py): a header made during the run
would take a core from the tests for about a minute. So CI makes them before the tests, beside the
plain-install check. The evaluations here go through cudaforge itself, so a header is made exactly as a
user's first build on a machine makes it (relu_cpu's build with ``-O3`` is also one the tests need; the
flag-less variant is built only for its header).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
# its evaluations' fork server ends with it, as the test run's do (tests/conftest.py)
os.environ.setdefault("CUDAFORGE_KEEP_SERVER_S", "0")


def shared_cache() -> Path:
    """The build cache the test run shares (conftest's ``ext_cache``); ``CUDAFORGE_TEST_CACHE`` overrides it."""
    return Path(os.environ.get("CUDAFORGE_TEST_CACHE", REPO / ".cache" / "test-extensions"))


def main() -> int:
    sys.path.insert(0, str(REPO))
    from engine.eval.build import makers
    from engine.eval.build.pch import HeaderStore
    from engine.eval.evaluate import evaluate
    from engine.eval.options import EvalOptions

    root = shared_cache()
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    task = (EXAMPLES / "tasks" / "relu.py").read_text()
    kernel = (EXAMPLES / "kernels" / "relu_cpu.py").read_text()
    flagless = kernel.replace('    extra_cflags=["-O3"],\n', "")
    assert flagless != kernel, "relu_cpu.py no longer passes -O3: update tests/make_headers.py"
    options = EvalOptions(device="cpu", cache_root=root, do_timing=False, use_pch=True, make_pch=True)

    def one(label: str, source: str) -> None:
        result = evaluate(task, source, options)
        pch = [e.pch for e in result.build.extensions]
        print(f"make_headers: relu_cpu {label}: {result.status}, header {pch}", flush=True)

    threads = [threading.Thread(target=one, args=a) for a in (("-O3", kernel), ("without flags", flagless))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    makers.wait(900)
    store = HeaderStore(root)
    ready = [p.name for p in sorted(store.root.glob("*")) if store.ready(p.name)]
    print(f"make_headers: {len(ready)} header set(s) ready in {root} after {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
