"""Guard policies (engine.guard.policy), the container-member fix, `cudaforge check`, config and recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import ConfigError, load_config
from engine.eval import stagetimes
from engine.eval.result import EvalResult
from engine.guard.findings import summarize
from engine.guard.policy import GuardPolicyError, GuardSettings, severity_table
from engine.guard.rules import KERNELBENCH_LEVEL_RULES, PARTIAL_REPLACEMENT_RULES, all_rule_ids
from engine.guard.share import share_record, trivial_share_message
from engine.guard.static import check_file, check_source

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "guard"
CONV_TASK = FIXTURES / "tasks" / "conv_relu_scale.py"
MNIST2 = Path("/work/main/.corpus/kb/src/kernelbench/prompts/few_shot/model_new_ex_mnist2.py")


def test_default_warns_on_partial_replacement_rules_and_strict_refuses() -> None:
    default, strict = severity_table("default"), severity_table("strict")
    for rule in PARTIAL_REPLACEMENT_RULES | KERNELBENCH_LEVEL_RULES:
        assert default[rule] == "warn" and strict[rule] == "refuse"
    for rule, severity in all_rule_ids().items():
        if rule not in PARTIAL_REPLACEMENT_RULES | KERNELBENCH_LEVEL_RULES:
            assert default[rule] == strict[rule] == severity, rule


def test_the_worker_is_told_to_refuse_l2_persistence_only_under_strict() -> None:
    assert "l2-persisting" in GuardSettings("strict").runtime_refuse
    assert "l2-persisting" not in GuardSettings("default").runtime_refuse
    assert GuardSettings("default", refuse=("l2-persisting",)).runtime_refuse == ["l2-persisting"]


def test_refuse_turns_a_warning_into_a_refusal_and_unknown_ids_are_errors() -> None:
    settings = GuardSettings("default", refuse=("timing-access", "torch-compute-in-forward"))
    assert settings.severity("timing-access") == "refuse"
    assert settings.severity("torch-compute-in-forward") == "refuse"
    assert settings.severity("functional-in-forward") == "warn"
    with pytest.raises(GuardPolicyError, match="valid rule ids: .*kernel-not-called"):
        GuardSettings("default", relax=("no-such-rule",))
    with pytest.raises(GuardPolicyError, match="default, strict"):
        GuardSettings("lenient")


def test_conv_epilogue_fixture_passes_default_and_is_refused_under_strict() -> None:
    path = FIXTURES / "partial_conv_epilogue.py"
    default = summarize(check_file(path, "cuda", policy="default"))
    strict = summarize(check_file(path, "cuda", policy="strict"))
    assert not default.refused and {f.rule for f in default.warnings} == {"submodule-compute-in-forward"}
    assert strict.refused and {f.rule for f in strict.refusals} == {"submodule-compute-in-forward"}


def test_kernel_called_through_container_members_counts_as_called() -> None:
    findings = check_file(FIXTURES / "partial_container_members.py", "cuda", policy="default")
    assert "kernel-not-called" not in {f.rule for f in findings}
    assert not summarize(findings).refused


def test_container_without_a_kernel_call_is_still_not_called() -> None:
    source = (
        (FIXTURES / "partial_container_members.py")
        .read_text()
        .replace("return ext.relu(self.linear(x).contiguous())", "return torch.relu(self.linear(x))")
    )
    assert "kernel-not-called" in {
        f.rule for f in summarize(check_source(source, "cuda", policy="default")).refusals
    }


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("cheat_*.py")), ids=lambda p: p.stem)
def test_every_cheat_fixture_is_refused_under_strict(path: Path) -> None:
    source = path.read_text()
    backend = "cpu" if "# backend: cpu" in source else "cuda"
    summary = summarize(check_source(source, backend, policy="strict"))
    rule = path.stem.removeprefix("cheat_")
    if all_rule_ids()[rule] == "refuse":
        assert summary.refused, path.name


@pytest.mark.skipif(not MNIST2.is_file(), reason="KernelBench corpus not unpacked here")
def test_kernelbench_mnist2_is_refused_under_strict_and_passes_default() -> None:
    assert summarize(check_file(MNIST2, "cuda", policy="strict")).refused
    assert not summarize(check_file(MNIST2, "cuda", policy="default")).refused


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd), "XDG_CONFIG_HOME": str(cwd / "cfg")}
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_check_exit_codes_and_json(tmp_path: Path) -> None:
    kernel = str(FIXTURES / "partial_conv_epilogue.py")
    ok = _cli("check", str(CONV_TASK), kernel, "--device", "cuda", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["guard_policy"] == "default" and data["refused"] is False
    assert {"rule", "severity", "line", "message", "relaxed", "source"} <= set(data["findings"][0])
    strict = _cli("check", str(CONV_TASK), kernel, "--guard", "strict", cwd=tmp_path)
    assert strict.returncode == 1 and "submodule-compute-in-forward" in strict.stdout
    relaxed = _cli(
        "check",
        str(CONV_TASK),
        kernel,
        "--guard",
        "strict",
        "--relax",
        "submodule-compute-in-forward",
        cwd=tmp_path,
    )
    assert relaxed.returncode == 0
    bad = _cli("check", str(CONV_TASK), kernel, "--relax", "no-such-rule", cwd=tmp_path)
    assert bad.returncode == 2 and "valid rule ids" in bad.stderr
    missing = _cli("check", str(CONV_TASK), str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode == 2


def test_check_reads_the_guard_table_of_the_project_config(tmp_path: Path) -> None:
    (tmp_path / "cudaforge.toml").write_text('[guard]\npolicy = "strict"\n')
    kernel = str(FIXTURES / "partial_conv_epilogue.py")
    assert _cli("check", str(CONV_TASK), kernel, cwd=tmp_path).returncode == 1
    assert _cli("check", str(CONV_TASK), kernel, "--guard", "default", cwd=tmp_path).returncode == 0


def test_check_refuses_a_broken_project_config_instead_of_ignoring_it(tmp_path: Path) -> None:
    """It used to fall back to the flags alone: a typo in [guard] silently judged under other rules."""
    kernel = str(FIXTURES / "partial_conv_epilogue.py")
    (tmp_path / "cudaforge.toml").write_text('[guard]\npolicy = "stirct"\n')
    broken = _cli("check", str(CONV_TASK), kernel, cwd=tmp_path)
    assert broken.returncode == 2 and "[guard] policy is 'stirct'" in broken.stderr
    (tmp_path / "cudaforge.toml").write_text("[guard\n")
    assert _cli("check", str(CONV_TASK), kernel, cwd=tmp_path).returncode == 2


def test_config_guard_table_validates_ids(tmp_path: Path) -> None:
    config = load_config(
        cwd=tmp_path, env={"HOME": str(tmp_path)}, overrides={"guard": {"refuse": ["timing-access"]}}
    )
    assert config.guard.policy == "default" and config.guard.refuse == ["timing-access"]
    with pytest.raises(ConfigError, match="unknown guard rule id"):
        load_config(cwd=tmp_path, env={"HOME": str(tmp_path)}, overrides={"guard": {"relax": ["typo"]}})
    with pytest.raises(ConfigError, match="policy"):
        load_config(cwd=tmp_path, env={"HOME": str(tmp_path)}, overrides={"guard": {"policy": "lax"}})


def test_share_record_and_the_trivial_rule() -> None:
    record = share_record(
        [
            {"name": "touch_kernel(float*)", "own": True, "ms": 0.001, "calls": 1},
            {"name": "cudnn::conv", "own": False, "ms": 0.5, "calls": 1},
        ],
        "cuda-profiler",
    )
    assert record["kernels"][0]["name"] == "cudnn::conv" and 0 < record["share"] < 0.01
    assert "own-kernel" not in (trivial_share_message(record) or "") and trivial_share_message(record)
    honest = share_record(
        [
            {"name": "k", "own": True, "ms": 0.2, "calls": 1},
            {"name": "c", "own": False, "ms": 0.5, "calls": 1},
        ],
        "cuda-profiler",
    )
    assert trivial_share_message(honest) is None
    assert trivial_share_message({**record, "method": "cpu-extension-wall"}) is None


def test_result_fields_round_trip_and_old_results_read_as_strict() -> None:
    result = EvalResult(
        status="correct", guard_policy="default", guard_refuse=["timing-access"], kernel_share={"share": 0.5}
    )
    back = EvalResult.from_json(result.to_json())
    assert (
        back.guard_policy == "default"
        and back.guard_refuse == ["timing-access"]
        and back.kernel_share == {"share": 0.5}
    )
    assert EvalResult.from_dict({"status": "correct"}).guard_policy == "strict"


@pytest.mark.slow
def test_headless_run_records_the_guard_in_session_toml_header_and_table(
    tmp_path: Path, ext_cache: Path
) -> None:
    from sessions.repo import SessionRepo
    from tests.loop_helpers import RELU_TASK, SCRIPTED

    cwd = tmp_path / "project"
    cwd.mkdir()
    (cwd / "cudaforge.toml").write_text(
        '[eval]\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n[guard]\nrelax = ["timing-disagreement"]\nrefuse = ["timing-access"]\n'
    )
    cmd = [
        sys.executable,
        "-m",
        "engine.cli.run",
        str(RELU_TASK),
        "--headless",
        "--auto-approve",
        "--rounds",
        "1",
        "--device",
        "cpu",
        "--name",
        "g",
        "--sessions-dir",
        str(tmp_path / "s"),
        "--guard",
        "strict",
        "--relax",
        "state-in-forward",
        "--coder",
        f"scripted/{SCRIPTED / 'steady' / 'coder'}",
        "--judge",
        f"scripted/{SCRIPTED / 'steady' / 'judge'}",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CUDAFORGE_CACHE_DIR": str(ext_cache),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }
    done = subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    label = "guard strict · relax timing-disagreement,state-in-forward · refuse timing-access"
    first = done.stdout.splitlines()[0]
    assert first.startswith("session g ") and label in first
    assert "share" in done.stdout and label in done.stdout.split("best:")[0].splitlines()[-1]
    session = SessionRepo.open(tmp_path / "s" / "g")
    try:
        guard = session.settings()["settings"]["guard"]
        relax = ["timing-disagreement", "state-in-forward"]
        assert guard == {"policy": "strict", "relax": relax, "refuse": ["timing-access"]}
        result = EvalResult.from_dict(session.history()[-1].read_json("eval.json"))
        assert result.guard_policy == "strict" and result.guard_refuse == ["timing-access"]
        assert "state-in-forward" in result.relaxed_rules
        # where each round's evaluation time went, read from the same eval.json the table reads
        lines = done.stdout.splitlines()
        at = lines.index("where each evaluation's time went (seconds; outside: around the worker):")
        header, *rows = lines[at + 1 : at + 1 + 1 + len(session.history())]
        assert header.split() == ["iter", "start", "reference", "build", "check", "time", "late", "outside", "profile", "total"]
        for row, item in zip(rows, session.history(), strict=True):
            cells = row.split()
            parts = stagetimes.breakdown(item.read_json("eval.json")["durations"])
            assert cells[0] == str(item.number) and float(cells[-1]) == round(stagetimes.total(item.read_json("eval.json")["durations"]), 1)
            assert f"{parts['outside']:.1f}" in cells and f"{parts['check']:.1f}" in cells
    finally:
        session.close()


def test_bench_summary_shows_the_guard_and_the_share_distribution() -> None:
    from engine.batch.statistics import TaskRow, format_table, set_statistics

    rows = [
        TaskRow("a", "done", True, 1.5, 1, 10, 0.0, 1.0, guard="guard default", best_share=0.2),
        TaskRow("b", "done", True, 0.9, 1, 10, 0.0, 1.0, guard="guard default", best_share=0.6),
        TaskRow("c", "done", True, 1.1, 1, 10, 0.0, 1.0, guard="guard default", best_share=1.0),
        TaskRow("d", "done", False, None, 1, 10, 0.0, 1.0, guard="guard default"),
    ]
    stats = set_statistics(rows)
    assert (stats["share_min"], stats["share_median"], stats["share_max"]) == (0.2, 0.6, 1.0)
    text = format_table(rows)
    assert "guard: guard default" in text
    assert "own-kernel share of the best kernels (3 task(s)): min 20% · median 60% · max 100%" in text


def test_bench_passes_the_guard_to_every_task() -> None:
    from engine.bench.runner import BenchOptions, task_command
    from engine.bench.tasks import BenchTask

    options = BenchOptions(
        out=Path("/tmp/nowhere"), guard="strict", relax=["timing-access"], refuse=["state-in-forward"]
    )
    cmd = task_command(BenchTask("relu", ROOT / "examples" / "tasks" / "relu.py"), options)
    assert cmd[cmd.index("--guard") + 1] == "strict"
    assert (
        cmd[cmd.index("--relax") + 1] == "timing-access"
        and cmd[cmd.index("--refuse") + 1] == "state-in-forward"
    )


def test_sessions_table_shows_the_guard(tmp_path: Path) -> None:
    from engine.cli.sessions import format_table
    from sessions.listing import list_sessions
    from sessions.repo import SessionRepo

    guard = {"policy": "strict", "relax": ["timing-access"], "refuse": []}
    with SessionRepo.create(
        tmp_path, task_source="x = 1\n", task_name="t", name="g", settings={"guard": guard}
    ):
        pass
    lines = format_table(list_sessions(tmp_path)).splitlines()
    assert lines[0].split()[6] == "GUARD" and lines[1].split()[7] == "strict,relax=timing-access"


def test_output_pane_rows_show_the_guard_and_the_share() -> None:
    from tui.model import check_rows

    result = EvalResult(
        status="correct",
        guard_policy="default",
        relaxed_rules=["timing-access"],
        kernel_share={
            "share": 0.25,
            "own_ms": 0.1,
            "library_ms": 0.3,
            "method": "cuda-profiler",
            "kernels": [
                {"name": "cudnn_conv", "own": False, "ms": 0.3, "calls": 1},
                {"name": "relu_scale_kernel", "own": True, "ms": 0.1, "calls": 1},
            ],
        },
    ).to_dict()
    rows = {row[0]: row for row in check_rows(result)}
    assert rows["guard"][1:3] == ("default", "relax timing-access")
    assert rows["own-kernel share"][1] == "25%" and rows["own-kernel share"][3] == "cuda-profiler"
    assert "cudnn_conv" in rows["  library kernel"][2]
    old = {row[0] for row in check_rows({"status": "correct"})}
    assert "guard" not in old and "own-kernel share" not in old


def test_tui_new_and_open_take_the_guard_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI's flags reach the one settings resolution (and a re-exec for ``--serve``)."""
    from engine.config import ConfigError
    from tui.cli import build_parser
    from tui.commands import _argv_for, _guard_flags, _settings

    monkeypatch.setenv("HOME", str(tmp_path))  # no user config file
    monkeypatch.chdir(tmp_path)  # no project config file
    args = build_parser(("tui.commands",)).parse_args(
        ["open", "s", "--guard", "strict", "--relax", "timing-access", "--relax", "timing-access"]
    )
    assert _guard_flags(args) == {"policy": "strict", "relax": ["timing-access"]}
    assert _argv_for(args, "open", "s")[-4:] == ["--guard", "strict", "--relax", "timing-access"]
    config, _ = _settings(args)
    assert config.guard.policy == "strict" and "timing-access" in config.guard.relax
    plain, _ = _settings(build_parser(("tui.commands",)).parse_args(["new", "t.py"]))
    assert plain.guard.policy == "default" and "timing-access" not in plain.guard.relax
    bad = build_parser(("tui.commands",)).parse_args(["new", "t.py", "--refuse", "nope"])
    with pytest.raises(ConfigError, match="valid rule ids"):
        _settings(bad)
    missing = _cli("new", str(tmp_path / "t.py"), "--refuse", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "valid rule ids" in missing.stderr
    assert not (tmp_path / "t.py").exists() and not any(tmp_path.rglob("*.git"))  # nothing created


def test_guard_corpus_script_reports_per_level_rates(tmp_path: Path) -> None:
    assets = tmp_path / "docs" / "assets"
    (assets / "solutions").mkdir(parents=True)
    (assets / "problems").mkdir()
    entries = []
    for i, (name, level) in enumerate(
        [("partial_conv_epilogue", 2), ("partial_container_members", 3), ("cheat_kernel-not-called", 1)]
    ):
        (assets / "solutions" / f"k{i}.py").write_text((FIXTURES / f"{name}.py").read_text())
        entries.append({"file": f"k{i}", "level": level, "problem_id": i + 1, "model": "m"})
    (assets / "raw_data.json").write_text(json.dumps(entries))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "guard_corpus.py"), str(tmp_path), "--list-refusals"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "| 1 | 1 | 1 (100%) | 1 (100%) |" in done.stdout
    assert "| 2 | 1 | 0 (0%) | 1 (100%) |" in done.stdout
    assert "| 3 | 1 | 0 (0%) | 1 (100%) |" in done.stdout
    assert "l1_p3 k2: line" in done.stdout and "kernel-not-called" in done.stdout


def test_classify_kernels_per_forward_and_own_names() -> None:
    from engine.guard.share import classify_kernels

    times = {
        "void relu_scale_kernel<float>(float const*, float*, float, long)": (0.3, 3),
        "sm90_xmma_fprop_implicit_gemm_tf32": (1.2, 3),
        "at::native::vectorized_elementwise_kernel<4, ...>": (0.3, 6),
    }
    own = ["void relu_scale_kernel<float>(float const*, float*, float, long)"]
    rows = {r["name"][:12]: r for r in classify_kernels(times, own, calls_per=3)}
    assert rows["void relu_sc"]["own"] and rows["void relu_sc"]["ms"] == pytest.approx(0.1)
    assert not rows["sm90_xmma_fp"]["own"] and rows["at::native::"]["calls"] == 2
    record = share_record(rows.values(), "cuda-profiler")
    assert record["share"] == pytest.approx(0.1 / 0.6) and record["kernels"][0]["name"].startswith("sm90")


def test_extension_timer_restores_the_module_after_measuring() -> None:
    import types

    from engine.guard.share import cpu_extension_share

    module = types.ModuleType("fake_ext")

    def work(n: int) -> int:
        return sum(range(n))

    module.work = work  # type: ignore[attr-defined]
    record = cpu_extension_share([module], lambda: (module.work(200_000), sum(range(200_000))))
    assert module.work is work
    assert record["method"] == "cpu-extension-wall" and 0 < record["share"] < 1  # both parts timed
    assert [k["name"] for k in record["kernels"] if k["own"]] == ["fake_ext.work"]
