"""One device, one guard (issue 47.5; ARCHITECTURE.md §3): a command resolves ``--device`` once, at its
edge, and makes its guard settings once; both then travel as they are down to the worker's supervisor.

``--device`` used to be resolved four or more times per command (the run's header, its profiler, the
loop factory, the agents, every evaluation, every spare worker), and the guard settings were unpacked
into loose fields and rebuilt by every evaluation. These tests hold the one-answer contract three ways:
where the resolver and the settings' constructor may be called at all (the source), how often a real
command asks the machine (a counting wrapper around the real probe), and that the object a command made
is the very one the real supervisor of its evaluation holds.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import engine.eval.options as options_module
from engine.eval.options import EvalOptions, EvaluationError
from engine.guard.policy import GuardSettings
from sessions.repo import SessionRepo
from tests.conftest import REPO
from tests.loop_helpers import RELU_KERNEL, RELU_TASK, SCRIPTED

# Where a command meets the user's --device: the only functions that may call resolve_device, once each.
DEVICE_EDGES = {
    ("engine/cli/eval.py", "run_eval"),
    ("engine/cli/model.py", "model_spec"),
    ("engine/cli/bench.py", "bench_command"),
    ("engine/cli/evalset.py", "build_eval_options"),
    ("engine/cli/run.py", "_run"),
    ("engine/cli/explore.py", "_explore"),
    ("engine/loop/factory.py", "create_loop"),  # the TUI's loop
    ("tui/explore_run.py", "ExploreRun.propose.work"),  # the TUI's exploration
    ("tui/edit_check.py", "check_edit"),  # only when there is no loop to take the device from
}
# Where flags meet a config's [guard]: the only functions outside engine/guard/ that may make a GuardSettings.
GUARD_MAKERS = {
    ("engine/cli/guard.py", "guard_settings"),
    ("engine/eval/options.py", "guard_of"),
}


def _calls(name: str) -> dict[tuple[str, str], int]:
    """``(file, qualified function) -> calls of name(...)`` over engine/ and tui/ (engine/guard/ owns the
    settings type and is left out)."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted([*(REPO / "engine").rglob("*.py"), *(REPO / "tui").rglob("*.py")]):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith("engine/guard/"):
            continue

        def visit(node: ast.AST, scope: list[str], relative: str = relative) -> None:
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    inner = [*scope, child.name]
                elif isinstance(child, ast.Call):
                    func = child.func
                    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                    if called == name:
                        key = (relative, ".".join(scope) or "<module>")
                        found[key] = found.get(key, 0) + 1
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return found


def test_only_the_edges_resolve_the_device_and_only_once_each() -> None:
    calls = _calls("resolve_device")
    assert set(calls) == DEVICE_EDGES, "resolve_device called away from a command's edge (or an edge lost it)"
    assert all(count == 1 for count in calls.values()), calls


def test_guard_settings_are_made_only_where_flags_meet_the_config() -> None:
    assert set(_calls("GuardSettings")) == GUARD_MAKERS


def test_the_options_hold_only_answers_and_their_copies_share_the_one_guard() -> None:
    """What an inner layer gets cannot be asked again: ``auto`` is refused, there are no loose rule
    lists to rebuild settings from, and a per-GPU copy (as an exploration or evalset makes) keeps the
    command's very object."""
    with pytest.raises(EvaluationError, match="resolved device"):
        EvalOptions(device="auto")
    with pytest.raises(TypeError):
        EvalOptions(device="cpu", relax=("timing-access",))  # type: ignore[call-arg]
    guard = GuardSettings("strict", relax=("timing-access",))
    options = EvalOptions(device="cuda", guard=guard)
    copy = dataclasses.replace(options, gpu_index=1, do_timing=False)
    assert copy.guard is guard and copy.device == "cuda"
    recorded = copy.settings()  # recorded flat, as results always had them
    assert (recorded["guard_policy"], recorded["relax"], recorded["refuse"]) == ("strict", ["timing-access"], [])


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Every time anything asks whether this machine has CUDA (what resolving ``auto`` costs), the real
    answer, counted."""
    asked: list[bool] = []
    real = options_module.cuda_available

    def counted() -> bool:
        asked.append(real())
        return asked[-1]

    monkeypatch.setattr(options_module, "cuda_available", counted)
    yield asked


@pytest.fixture
def supervisors(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every real WorkerSupervisor an evaluation makes, kept (the supervisor itself runs unchanged)."""
    import engine.eval.evaluate as evaluate_module

    made: list[Any] = []
    real = evaluate_module.WorkerSupervisor

    class Kept(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(evaluate_module, "WorkerSupervisor", Kept)
    return made


def _quiet_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path, config: str = "") -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "cudaforge.toml").write_text("[eval]\ntrials = 2\ntiming_trials = 5\ntiming_budget_s = 1.0\n" + config)
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CUDAFORGE_CACHE_DIR", str(cache))


def _keep(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    """What ``module.name(...)`` returns, kept, the real function still answering."""
    kept: list[Any] = []
    real: Callable[..., Any] = getattr(module, name)

    def keeping(*args: Any, **kwargs: Any) -> Any:
        kept.append(real(*args, **kwargs))
        return kept[-1]

    monkeypatch.setattr(module, name, keeping)
    return kept


@pytest.mark.slow
def test_eval_resolves_once_and_its_guard_object_reaches_the_supervisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ext_cache: Path, probes: list[bool], supervisors: list[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import engine.cli.eval as eval_cli
    from tui.cli import main

    _quiet_project(tmp_path, monkeypatch, ext_cache, '[guard]\nrelax = ["state-in-forward"]\n')
    made = _keep(monkeypatch, eval_cli, "guard_settings")
    code = main(["eval", str(RELU_TASK), str(RELU_KERNEL), "--device", "auto", "--guard", "strict",
                 "--relax", "timing-access", "--no-timing", "--json"])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code in (0, 1), result  # the CPU kernel on a GPU machine is judged, not refused at the door
    assert len(probes) == 1  # asked once, at the edge: not again by the evaluation
    [guard] = made
    assert guard == GuardSettings("strict", ("state-in-forward", "timing-access"))  # flags over the config
    [supervisor] = supervisors
    assert supervisor.guard is guard  # not unpacked into fields and rebuilt on the way
    assert supervisor.device == result["device"] == ("cuda" if probes[0] else "cpu")
    assert result["guard_policy"] == "strict" and {"state-in-forward", "timing-access"} <= set(result["relaxed_rules"])


@pytest.mark.slow
def test_a_headless_run_resolves_once_and_every_evaluation_carries_the_runs_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ext_cache: Path, probes: list[bool], supervisors: list[Any],
) -> None:  # fmt: skip
    import engine.loop.factory as factory
    from engine.cli.run import main

    _quiet_project(tmp_path, monkeypatch, ext_cache)
    loops = _keep(monkeypatch, factory, "make_loop")
    code = main([str(RELU_TASK), "--headless", "--auto-approve", "--rounds", "0", "--name", "once",
                 "--sessions-dir", str(tmp_path / "s"), "--device", "auto", "--relax", "timing-access",
                 "--coder", f"scripted/{SCRIPTED / 'steady' / 'coder'}",
                 "--judge", f"scripted/{SCRIPTED / 'steady' / 'judge'}"])  # fmt: skip
    assert code == 0
    # once for the whole run: not again for the session's record, the profiler, the loop, the agents
    assert len(probes) == 1
    device = "cuda" if probes[0] else "cpu"
    [loop] = loops
    options = loop.options.eval_options
    assert options.device == device and options.guard == GuardSettings(relax=("timing-access",))
    assert supervisors and all(s.options is options and s.guard is options.guard for s in supervisors)
    with SessionRepo.open(tmp_path / "s" / "once") as session:
        assert session.settings()["settings"]["eval"]["device"] == device
        seed = session.history()[0].eval_result
    assert seed["device"] == device and seed["settings"]["relax"] == ["timing-access"]
