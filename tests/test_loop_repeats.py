"""A Coder's kernel that repeats an earlier iteration is neither built nor timed again
(engine/loop/duplicates.py, ARCHITECTURE.md §2): it is pointed out once, then committed "same as N"
with N's result, and it never competes for best. A real loop, a real session repo, real evaluations.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.events import EvalFinished, StageStarted
from engine.loop.duplicates import normalise, same_as
from engine.loop.machine import FINISHED
from tests.loop_helpers import SCRIPTED, make_loop, new_session

KERNEL = '''import torch
SOURCE = """
// the kernel
__global__ void k(float* x) {  x[0] = 1.0f; }  /* one store */
"""
class ModelNew(torch.nn.Module):  # the candidate
    def forward(self, x):
        return x
'''


def test_comments_and_spacing_do_not_make_a_kernel_new() -> None:
    relaid = KERNEL.replace("// the kernel\n", "").replace("{  x", "{ x").replace("  # the candidate", "")
    relaid = relaid.replace('SOURCE = """\n', 'SOURCE = """').replace("class ModelNew", "\n\nclass ModelNew")
    assert normalise(relaid) == normalise(KERNEL)
    assert same_as(relaid, [(0, KERNEL.replace("1.0f", "2.0f")), (1, KERNEL), (2, relaid)]) == 1


def test_a_change_in_code_in_a_cuda_string_or_in_indentation_is_new() -> None:
    for changed in (
        KERNEL.replace("1.0f", "2.0f"),  # inside the CUDA source
        KERNEL.replace("return x", "return x * 1"),  # the Python code
        KERNEL.replace("        return x", "    return x").replace("    def forward", "def forward"),
        KERNEL.replace("x[0]", "x[1]"),
    ):
        assert normalise(changed) != normalise(KERNEL)
        assert same_as(changed, [(0, KERNEL)]) is None
    unparsable = "def broken(:\n    pass  \n"
    assert (
        normalise(unparsable) == normalise("def broken(:\n  pass\n")
        and same_as(unparsable, [(0, "x = 1")]) is None
    )


def test_the_same_kernel_three_times_is_evaluated_once_and_the_first_stays_best(
    tmp_path: Path, ext_cache: Path
) -> None:
    coder = tmp_path / "coder"
    coder.mkdir()
    shutil.copy(SCRIPTED / "steady" / "coder" / "01_seed.md", coder / "01_seed.md")  # repeats once run out
    events: list = []
    session = new_session(tmp_path)
    loop = make_loop(session, ext_cache, coder_dir=coder, judge_dir=SCRIPTED / "steady" / "judge", rounds=2,
                     events=events)  # fmt: skip
    assert loop.run() == FINISHED
    history = session.history()
    assert [it.number for it in history] == [0, 1, 2] and history[0].correct
    results = [it.eval_result for it in history]
    assert [r.get("same_as") for r in results] == [None, 0, 0]
    assert all(r["status"] == results[0]["status"] and r["speedup"] == results[0]["speedup"] for r in results)
    assert "the same kernel as iteration 0" in results[1]["messages"][0]
    # one evaluation ran: the seed's (its worker's stages); the repeats only reported the reused result
    evaluated = [e for e in events if isinstance(e, StageStarted) and e.detail == "evaluate"]
    assert {e.iteration for e in evaluated} == {0}
    assert [e.result.get("same_as") for e in events if isinstance(e, EvalFinished)] == [None, 0, 0]
    # the Coder was told once per round, with the fact, before its repeat was committed
    for it in history[1:]:
        told = [
            r
            for r in it.transcript
            if r["role"] == "coder" and "same as iteration 0" in r["messages"][-1]["content"]
        ]
        assert len(told) == 1
    assert session.best().number == 0 and session.session_best()[0].number == 0
    session.close()
