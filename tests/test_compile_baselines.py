"""torch.compile baselines beside eager (engine/eval/baselines.py), through ``cudaforge eval
--compile-baseline`` in a real subprocess with a real inductor compile on this CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import ConfigError, load_config
from engine.eval.baselines import speedup_against
from tests.test_cli_eval import KERNEL, TASK, cudaforge


@pytest.mark.slow
def test_a_correct_kernel_is_also_compared_with_torch_compile(ext_cache: Path) -> None:
    done = cudaforge(
        "eval", str(TASK), str(KERNEL), "--device", "cpu", "--timing-trials", "10", "--json",
        "--compile-baseline", "default", cache=ext_cache,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    [(mode, baseline)] = result["baselines"].items()
    assert mode == "default" and baseline["compiled_matches"] is True and baseline["device"] == "cpu"
    assert baseline["eager_ms"] > 0 and baseline["compiled_ms"] > 0 and baseline["compile_seconds"] > 0
    assert result["durations"]["baselines"] > 0
    assert "compile_baselines" not in result["settings"]  # how it ran, not how it was judged
    expected = result["speedup"] * baseline["compiled_ms"] / baseline["eager_ms"]
    assert speedup_against(result["speedup"], baseline) == pytest.approx(expected)


def test_the_speedup_against_a_baseline_needs_a_matching_compiled_output() -> None:
    measured = {"compiled_matches": True, "eager_ms": 2.0, "compiled_ms": 1.0}
    assert speedup_against(3.0, measured) == pytest.approx(1.5)  # 3x eager, compile itself 2x eager
    assert speedup_against(3.0, {**measured, "compiled_matches": False}) is None
    assert speedup_against(None, measured) is None and speedup_against(3.0, {"failed": "ran over"}) is None


def test_an_unknown_mode_is_refused_in_the_config(tmp_path: Path) -> None:
    (tmp_path / "cudaforge.toml").write_text('[eval]\ncompile_baselines = ["reduce-overhead-please"]\n')
    with pytest.raises(
        ConfigError, match="compile_baselines has 'reduce-overhead-please'; use any of default"
    ):
        load_config(cwd=tmp_path)
    done = cudaforge("eval", str(TASK), str(KERNEL), "--compile-baseline", "fast")
    assert done.returncode == 2 and "invalid choice: 'fast'" in done.stderr


def test_the_summary_and_the_checks_table_show_the_speedup_against_each_mode() -> None:
    from engine.cli.eval import baseline_text
    from tui.model import check_rows

    measured = {"compiled_matches": True, "eager_ms": 2.0, "compiled_ms": 1.0}
    assert (
        baseline_text(3.0, measured) == "speedup 1.50× · compiled 1.0000 ms vs eager 2.0000 ms, same process"
    )
    assert baseline_text(3.0, {"failed": "ran over 900 s"}) == "not measured (ran over 900 s)"
    result = {"status": "correct", "speedup": 3.0, "baselines": {"max-autotune": measured}}
    assert (
        "vs torch.compile (max-autotune)",
        "1.50x",
        "compiled 1.0000 ms vs eager 2.0000 ms",
        "",
    ) in check_rows(result)


BASELINES = {  # eager 2 ms; compiled 1.6 ms (default) and 1.25 ms (max-autotune), both matching eager
    "default": {"mode": "default", "compiled_matches": True, "eager_ms": 2.0, "compiled_ms": 1.6},
    "max-autotune": {"mode": "max-autotune", "compiled_matches": True, "eager_ms": 2.0, "compiled_ms": 1.25},
}


@pytest.mark.asyncio
async def test_the_workbench_and_the_report_show_the_best_against_each_mode(tmp_path: Path) -> None:
    from engine.batch.report import gather, render_html
    from engine.eval.result import EvalResult, Timing, TimingStats
    from sessions.repo import SessionRepo
    from tests.test_tui_fixtures import TASK, kernel
    from tui.app import CudaforgeApp
    from tui.widgets.output_pane import OutputPane
    from tui.widgets.status_line import StatusLine

    def result(speedup: float, baselines: dict | None) -> dict:
        timing = Timing("cuda-events", TimingStats.from_samples([2.0 / speedup]), TimingStats.from_samples([2.0]))
        data = EvalResult(status="correct", timing=timing, speedup=speedup).to_dict()
        data["baselines"] = baselines or {}
        return data

    with SessionRepo.create(tmp_path, task_source=TASK, task_name="relu", name="vs") as repo:
        repo.record_iteration(kernel_source=kernel(0), eval_result=result(1.2, None), phase="seed")
        repo.record_iteration(kernel_source=kernel(1), eval_result=result(2.0, BASELINES), phase="optimize")
    repo = SessionRepo.open(tmp_path / "vs")
    app = CudaforgeApp(sessions_root=tmp_path, session=repo, mode="replay")
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("n")
        await pilot.pause()
        status = app.screen.query_one(StatusLine)
        assert "best 2.00x (vs compile 1.60x · max-autotune 1.25x)" in status.text()
        output = app.screen.query_one(OutputPane)
        output.active = "tab-chart"
        await pilot.pause()
        lines = [(list(d.x), list(d.y)) for d in output.query_one("#speedup-plot")._datasets]
        assert ([0.0, 1.0], [1.25, 1.25]) in lines and ([0.0, 1.0], [1.6, 1.6]) in lines  # eager ÷ compiled
    page = render_html(gather(repo))
    repo.close()
    assert "vs compile 1.60x · max-autotune 1.25x" in page
