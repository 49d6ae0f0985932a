"""The pane data layer and the settings file, without running an app."""

from __future__ import annotations

import json

import pytest

from tests.test_tui_fixtures import KERNEL, PROFILE, TASK, eval_dict, kernel, transcript
from tui import model, settings


def test_task_facts_reads_shapes_and_dtypes_without_torch() -> None:
    facts = model.task_facts(TASK)
    assert facts.inputs == ["float16 [8 × 4096]"]
    assert facts.init_inputs == []


def test_cuda_sources_extracts_the_compiled_strings_only() -> None:
    text = model.cuda_sources(kernel(3))
    assert "__global__ void relu_kernel" in text and "version 3" in text
    assert "class ModelNew" not in text
    assert model.cuda_sources("x = 'plain'") == ""


def test_check_rows_from_a_real_eval_result() -> None:
    rows = model.check_rows(eval_dict("correct", 2.0))
    assert rows[0][:2] == ("trial 0", "pass")
    assert rows[-1][:3] == ("verdict", "correct", "2.00x")
    assert any(r[0] == "candidate" and r[1].endswith("ms") for r in rows)
    failed = model.check_rows(eval_dict("incorrect", None))
    assert failed[0][1] == "FAIL" and failed[-1][2] == "—"


def test_ncu_rows_and_build_log() -> None:
    assert ("relu_kernel", "dram__throughput", "71.5", "%") in model.ncu_rows(PROFILE)
    assert model.ncu_rows(None) == []
    assert "ninja: build compile_error" in model.build_log_lines(eval_dict("compile_error", None))


def test_conversation_headers_carry_role_model_tokens_cost() -> None:
    messages = model.conversation(transcript(1))
    assert [m.role for m in messages] == ["judge", "coder"]
    assert messages[0].header() == "Judge · anthropic/claude-sonnet-4-5 · 120 tok · $0.0100"
    failed = model.conversation([{"role": "coder", "reply": None, "error": "timeout"}])
    assert "timeout" in failed[0].text


def test_speedup_chart_marks_the_best_correct() -> None:
    chart = model.speedup_chart(
        [(0, "compile_error", None), (1, "correct", 1.0), (2, "correct", 2.0)], width=10
    )
    lines = chart.splitlines()
    assert lines[2].count("█") == 10 and lines[2].endswith("★")
    assert lines[1].count("█") == 5 and "★" not in lines[1]
    assert model.speedup_chart([]) == "no iterations yet"


def test_unified_diff_between_versions() -> None:
    diff = model.unified_diff(kernel(1), kernel(2), "iter 1", "iter 2")
    assert diff.startswith("--- iter 1\n+++ iter 2\n")
    assert (
        "-        return torch.relu(x)  # version 1" in diff
        and "+        return torch.relu(x)  # version 2" in diff
    )
    assert model.unified_diff(KERNEL, KERNEL, "a", "b") == ""


def test_settings_come_from_the_config_and_a_remembered_choice_wins(tui_env, tmp_path, monkeypatch) -> None:
    """[ui] theme, [ui.keymap] and [loop] approval are the TUI's settings, from the same files as
    every command; a project file beats the user file; the palette's remembered choice beats both."""
    (tui_env / "config.toml").write_text('[ui]\ntheme = "cudaforge-16"\n[ui.keymap]\n"app.quit" = "ctrl+q"\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "cudaforge.toml").write_text('[ui]\ntheme = "cudaforge-light"\n[loop]\napproval = "auto"\n')
    monkeypatch.chdir(project)
    loaded = settings.load_settings()
    assert (loaded.theme, loaded.approval_policy, loaded.keymap) == (
        "cudaforge-light",
        "auto",
        {"app.quit": "ctrl+q"},
    )
    settings.remember(theme="cudaforge-16")
    assert json.loads(settings.state_path().read_text())["theme"] == "cudaforge-16"
    assert settings.load_settings().theme == "cudaforge-16"


def test_a_tui_table_is_refused_like_any_unknown_key_and_replay_still_opens(tui_env) -> None:
    """The old ``[tui]`` table is not a setting: the loader names the valid tables, and the TUI reports
    the problem and carries on with the defaults instead of silently opening read-only."""
    (tui_env / "config.toml").write_text('[tui]\napproval_policy = "auto"\n')
    loaded = settings.load_settings()
    assert loaded.approval_policy == "ask" and "unknown key 'tui'" in loaded.problems[0]
    (tui_env / "config.toml").write_text("not = [toml")
    assert "not valid TOML" in settings.load_settings().problems[0]


def test_the_checks_table_shows_the_ablation_the_shapes_and_weak_outputs() -> None:
    result = {
        "status": "correct",
        "kernel_share": {"test": "ablation", "ablation": {"outcome": "needed", "how": "mismatch at (0, 1)"}},
        "shapes": {"variants": [{"status": "correct"}, {"status": "error", "sizes": {"dim": 255}, "message": "x"}]},
        "weak_outputs": [{"output": "output", "passes": ["zeros", "constant"], "checks": ["spread"]}],
    }
    rows = {row[0]: row for row in model.check_rows(result)}
    assert rows["own kernels"][1:] == ("needed", "mismatch at (0, 1)", "ablation")
    assert rows["shapes"][1:3] == ("correct at 1/2 other shapes", "dim=255")
    assert rows["weak output"][1:] == ("output", "zeros/constant pass", "spread")
    assert "own-kernel share" not in rows  # a share record from a crashed ablation has no share measured


@pytest.mark.asyncio
async def test_the_task_pane_says_when_the_task_is_weak() -> None:
    from textual.app import App
    from textual.widgets import Static

    from tui.widgets.task_pane import TaskPane

    class Host(App):
        def compose(self):  # noqa: ANN202
            yield TaskPane()

    app = Host()
    async with app.run_test(size=(80, 24)):
        pane = app.query_one(TaskPane)
        pane.show("softmax", TASK, "weak task: a degenerate answer passes the value check for output")
        text = str(app.query_one("#task-facts", Static).render())
        assert "⚠ weak task: a degenerate answer passes" in text
        pane.show("softmax", TASK)
        assert "weak task" not in str(app.query_one("#task-facts", Static).render())
