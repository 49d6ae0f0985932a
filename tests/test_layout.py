"""The repository's shape (ARCHITECTURE.md §1): layers with imports only going down, no cycles, a small
engine root, short functions, docs that point at what exists. ``tests/layout_rules.py`` reads the code;
these tests hold the rules, and each rule is shown to fail on a planted violation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import layout_rules as L


def test_no_import_cycles_among_product_modules_lazy_imports_included() -> None:
    assert L.cycles() == []


def test_imports_only_go_down_the_layers() -> None:
    assert L.upward_imports() == []


def test_every_product_module_belongs_to_a_layer() -> None:
    for path in L.product_files():
        module = L.module_name(path)
        if module != "engine":
            L.layer_rank(module)


def test_at_most_eight_modules_directly_in_engine() -> None:
    assert len(L.engine_root_modules()) <= L.MAX_ENGINE_ROOT_MODULES, L.engine_root_modules()


def test_no_function_is_over_eighty_lines() -> None:
    assert [f"{f.where} {f.name} ({f.lines})" for f in L.long_functions()] == []


def test_no_docstring_or_comment_cites_a_design_document() -> None:
    assert L.design_citations() == []


def test_every_path_architecture_names_exists_and_every_section_cited_exists() -> None:
    assert L.missing_architecture_paths() == []
    assert L.dangling_section_citations() == []


def test_a_lazy_import_cycle_is_found() -> None:
    graph = {"engine.a": {"engine.b"}, "engine.b": {"engine.c"}, "engine.c": {"engine.a"}, "engine.d": set()}
    assert L.cycles(graph) == [["engine.a", "engine.b", "engine.c"]]


def test_the_import_reader_sees_imports_inside_functions() -> None:
    import ast

    tree = ast.parse("def f():\n    from engine.eval import worker\n    import engine.config\n")
    names = set(L._imported_names(tree, "engine.x", False))
    assert {"engine.eval.worker", "engine.config"} <= names


def test_an_upward_import_is_found() -> None:
    graph = {"engine.config": {"engine.loop.machine"}, "engine.loop.machine": set()}
    assert L.upward_imports(graph) == ["engine.config (contracts) -> engine.loop.machine (batch and loop)"]


def test_a_design_citation_and_a_missing_path_are_found(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('"""Follows DESIGN §3."""\nx = 1  # see ARCHITECTURE.md §3\n')
    assert L.design_citations([source]) == [f"{source}:1"]
    assert L.DESIGN_CITATION.search("see DESIGN §3") and L.DESIGN_CITATION.search("../shared/DESIGN.md")
    assert not L.DESIGN_CITATION.search("ARCHITECTURE.md §3 (its design)")
    assert L.missing_architecture_paths("`engine/eval/worker.py` and `engine/split/`") == ["engine/split"]


def test_a_long_function_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "engine" / "long.py"
    module.parent.mkdir()
    module.write_text("def f():\n" + "    x = 1\n" * 81)
    monkeypatch.setattr(L, "ROOT", tmp_path)
    monkeypatch.setattr(L, "PACKAGES", ("engine",))
    assert [(f.name, f.lines) for f in L.long_functions()] == [("f", 82)]


def test_the_picture_prints() -> None:
    out = subprocess.run(
        [sys.executable, str(L.ROOT / "tests" / "layout_rules.py")], capture_output=True, text=True, check=True
    ).stdout
    assert "# cycles: 0" in out and "# imports up the layers: 0" in out
    assert "commands         -> " in out


def test_a_broken_command_module_is_an_error_not_a_missing_command(tmp_path: Path) -> None:
    """tui/cli.py used to skip a command module that failed to import: its commands just vanished."""
    (tmp_path / "brokencmd.py").write_text("import no_such_module_anywhere\n")
    code = textwrap.dedent(
        """
        import sys
        from tui import cli
        cli.COMMAND_MODULES = (*cli.COMMAND_MODULES, "brokencmd")
        cli.HEADLESS_COMMANDS["eval"] = "brokencmd"  # the command's own module, or any in a full parse
        sys.exit(max(cli.main(["eval", "--help"]), cli.main(["--help"])))
        """
    )
    env_path = f"{tmp_path}:{L.ROOT}"
    env = {"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=L.ROOT, env=env)
    assert out.returncode == 1
    assert "brokencmd does not import" in out.stderr and "no_such_module_anywhere" in out.stderr
