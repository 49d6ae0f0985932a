"""Time to the first full workbench screen, headless (target: ≤ 1 s on a 2-core machine).

Measures, in a fresh interpreter, from before ``import tui.app`` to the moment the workbench of a
real session (made here with the session API) has mounted and painted its first frame — imports,
git reads, composition and layout included. After the clock stops, each run checks that the frame
it timed shows real content from every pane (task, kernel, build log, both chat replies, timeline,
status line, keys) and fails otherwise (exit 2), so deferring visible work cannot pass for speed.
Prints one line per run and the median; exits 1 when the median is over the budget.
Usage: ``python benchmarks/tui_startup.py [--runs 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 1.0
EXIT_OVER_BUDGET, EXIT_FAILED = 1, 2

CHILD = r"""
import asyncio, html, os, re, sys, time
t0 = time.perf_counter()
EXPECTED = {EXPECTED!r}
from tui.app import CudaforgeApp
from sessions.repo import SessionRepo
from tui.screens.workbench import WorkbenchScreen

async def main():
    repo = SessionRepo.open(sys.argv[1])
    app = CudaforgeApp(sessions_root=os.path.dirname(sys.argv[1]), session=repo, mode="replay")
    async with app.run_test(size=(120, 40)) as pilot:
        while not (isinstance(app.screen, WorkbenchScreen) and app.screen.is_mounted):
            await asyncio.sleep(0.005)
        await pilot.pause()  # the first full frame is laid out and painted
        elapsed = time.perf_counter() - t0
        # After the clock stops: the frame it timed must show every pane's real content.
        svg = app.export_screenshot()
        text = html.unescape(" ".join(re.findall(r">([^<]*)</text>", svg))).replace("\xa0", " ")
        text = " ".join(text.split())  # styled spans are separate <text> elements
        missing = [s for s in EXPECTED if " ".join(s.split()) not in text]
    repo.close()
    if missing:
        sys.exit(f"incomplete first frame, missing: {missing}")
    print(f"{elapsed:.3f} {'torch' in sys.modules}")

asyncio.run(main())
"""

# Something from each pane of the fixture session at iteration 0, 120×40: task facts and source,
# kernel title and source, build log, both chat replies, timeline, status line, footer.
EXPECTED = [
    "inputs: float16 [8 × 4096]",
    "import torch",
    "kernel · iter 0 (main)",
    "relu_kernel",
    "ninja: build compile_error",
    "Bottleneck number 0",
    "Here is kernel version 0",
    "✓ #2 optimize 1.80x ★",
    "replay 1/4 · main",
    "n Next iteration",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.test_tui_fixtures import make_session

    with tempfile.TemporaryDirectory() as folder:
        session = make_session(Path(folder) / "sessions")
        env = {"CUDAFORGE_STATE_DIR": str(Path(folder) / "state"), "PYTHONPATH": str(REPO)}
        times = []
        for run in range(args.runs):
            done = subprocess.run(
                [sys.executable, "-c", CHILD.replace("{EXPECTED!r}", repr(EXPECTED)), str(session)],
                cwd=REPO,
                capture_output=True,
                text=True,
                env={**__import__("os").environ, **env},
            )
            if done.returncode != 0:  # an incomplete frame or a crash: no time to report
                print(f"run {run + 1} failed:\n{done.stderr.strip()}", file=sys.stderr)
                return EXIT_FAILED
            seconds, torch_loaded = done.stdout.split()
            times.append(float(seconds))
            print(
                f"run {run + 1}: {float(seconds):.3f} s to first full screen (torch imported: {torch_loaded})"
            )
    median = statistics.median(times)
    print(f"median {median:.3f} s (budget {BUDGET_S:.1f} s): {'OK' if median <= BUDGET_S else 'OVER'}")
    return 0 if median <= BUDGET_S else EXIT_OVER_BUDGET


if __name__ == "__main__":
    sys.exit(main())
