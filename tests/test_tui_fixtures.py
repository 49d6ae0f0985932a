"""Shared builders for the TUI tests: a real session repository, sample records, screen readers.

Not a test module by content: it holds the plain helpers the ``test_tui_*`` modules import. The
fixtures built on them (``tui_env``, ``session_root``) live in ``tests/tui_plugin.py``, which
``tests/conftest.py`` registers, so tests ask for them by name and import nothing. The session is
written through the real ``SessionRepo.create``/``record_iteration`` with EvalResult-shaped dicts
made by ``engine.eval.result.EvalResult.to_dict()``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.eval.result import BuildInfo, EvalResult, Timing, TimingStats, TrialResult
from sessions.repo import SessionRepo

TASK = """import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, N, dtype=torch.float16)]


def get_init_inputs():
    return []
"""

KERNEL = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] : 0;  // version {version}
}}
"""


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)  # version {version}
'''


def kernel(version: int) -> str:
    return KERNEL.format(version=version)


def eval_dict(status: str, speedup: float | None, log: str = "") -> dict[str, Any]:
    timing = None
    if speedup is not None:
        ref = TimingStats.from_samples([1.0, 1.1, 0.9])
        cand = TimingStats.from_samples([1.0 / speedup] * 3)
        timing = Timing(method="cpu-perf-counter", candidate=cand, reference=ref)
    result = EvalResult(
        status=status,
        stage="time" if status == "correct" else "build",
        task="relu",
        build=BuildInfo(seconds=1.5, log=log or f"ninja: build {status}"),
        trials=[
            TrialResult(index=k, seed=k, passed=status == "correct", max_abs_error=0.0) for k in range(2)
        ],
        timing=timing,
        speedup=speedup,
    )
    return result.to_dict()


def transcript(version: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "judge",
            "model": "anthropic/claude-sonnet-4-5",
            "reply": f"**Bottleneck** number {version}",
            "usage": {"input_tokens": 100, "output_tokens": 20},
            "cost_usd": 0.01,
        },
        {
            "role": "coder",
            "model": "openai/o3",
            "reply": f"Here is kernel version {version}",
            "usage": {"input_tokens": 200, "output_tokens": 50},
            "cost_usd": 0.02,
        },
    ]


PROFILE = {
    "kind": "ncu",
    "metrics": {"relu_kernel": {"dram__throughput": [71.5, "%"], "sm__warps_active": [40.2, "%"]}},
}
SUGGESTION = {
    "mode": "optimize",
    "bottleneck": "memory bound",
    "optimization_method": "vectorize loads",
    "modification_plan": "use float4",
    "key_metrics": ["dram__throughput"],
    "text": "",
    "parsed": True,
}

# main: #0 seed compile_error, #1 repair 1.10x, #2 optimize 1.80x (best), #3 optimize incorrect
MAIN = [
    ("seed", "compile_error", None),
    ("repair", "correct", 1.1),
    ("optimize", "correct", 1.8),
    ("optimize", "incorrect", None),
]


def make_session(root: Path, name: str = "relu-demo") -> Path:
    """Create the demo session (plus a branch ``from-iter-1`` with one 2.5x iteration); return its path."""
    with SessionRepo.create(root, task_source=TASK, task_name="relu", name=name) as repo:
        for version, (phase, status, speedup) in enumerate(MAIN):
            repo.record_iteration(
                kernel_source=kernel(version),
                eval_result=eval_dict(status, speedup),
                phase=phase,
                profile=PROFILE if status == "correct" else None,
                suggestion=SUGGESTION if version else None,
                transcript=transcript(version),
                coder="openai/o3",
                judge="anthropic/claude-sonnet-4-5",
                tokens=370,
                cost_usd=0.03,
            )
        branch = repo.branch_from(1)
        repo.record_iteration(
            kernel_source=kernel(9),
            eval_result=eval_dict("correct", 2.5),
            phase="optimize",
            transcript=transcript(9),
            branch=branch,
            tokens=100,
            cost_usd=0.01,
        )
        return repo.path


def screen_text(app: Any) -> str:
    """The visible screen as plain text, read back from Textual's own SVG export."""
    import html
    import re

    svg = app.export_screenshot()
    return html.unescape(" ".join(re.findall(r">([^<]*)</text>", svg))).replace("\xa0", " ")


def unique(messages: list[Any], kind: type) -> list[Any]:
    """Messages of one kind, each once (a bubbling message reaches the hook at every pump it visits)."""
    seen: dict[int, Any] = {}
    for message in messages:
        if isinstance(message, kind):
            seen.setdefault(id(message), message)
    return list(seen.values())


CELL_PX = 12.2  # the width of one terminal cell in Textual's SVG export


def screen_rows(app: Any) -> list[str]:
    """The visible screen as rows of cells, rebuilt from the SVG export's positioned text runs
    (``screen_text`` runs every pane together; this keeps each run in its row and column)."""
    import html
    import re

    svg = app.export_screenshot()
    width, height = app.size
    rows = [[" "] * width for _ in range(height)]
    pattern = r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="([\d.]+)" clip-path="url\(#[^)]*-line-(\d+)\)">([^<]*)</text>'
    for x, length, row, text in re.findall(pattern, svg):
        text = html.unescape(text).replace("\xa0", " ")
        col, cells, line = round(float(x) / CELL_PX), round(float(length) / CELL_PX), int(row)
        step = cells // max(1, len(text))  # 2 for a run of wide characters
        for k, char in enumerate(text):
            if line < height and col + k * step < width:
                rows[line][col + k * step] = char
    return ["".join(r) for r in rows]


def region_text(app: Any, widget: Any) -> str:
    """What ``widget`` shows on screen (its region cut out of the screen), as one line of words."""
    region = widget.region
    rows = screen_rows(app)[region.y : region.y + region.height]
    return " ".join(" ".join(row[region.x : region.x + region.width] for row in rows).split())


#: the two sizes every journey runs at (the product's floor and a common tmux window)
SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


async def until(pilot: Any, condition: Callable[[], bool], seconds: float = 60.0) -> None:
    """Wait until ``condition`` holds, pausing the app between looks (bounded: a frame or an event may
    come later on a loaded machine); an AssertionError when it never does."""
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("timed out waiting")
