"""What cudaforge imports is what an install provides (engine/cli/deps.py, issue 24).

The split build once imported ``tree_sitter_cuda`` inside a function while only the ``syntax`` extra
installed it; these tests read the real source tree and the real pyproject.toml, so such a gap fails
here, and a real subprocess shows the check failing where a core module is missing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from engine.cli import deps

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _closure(names: set[str]) -> set[str]:
    """The distributions ``names`` need, transitively (markers ignored: what any install may pull in)."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_a_lazy_import_inside_a_function_is_seen() -> None:
    found = {i.module: i.files for i in deps.imported_modules()}
    assert "engine/eval/build/split/parse.py" in found["tree_sitter_cuda"]  # imported only inside parser()
    assert "torch" in found and "git" in found


def test_every_third_party_import_comes_with_the_core_install_or_is_a_listed_optional() -> None:
    core = _closure({_name(r) for r in _project()["dependencies"]})
    providers = metadata.packages_distributions()
    undeclared = []
    for item in deps.third_party(deps.imported_modules()):
        if item.module in deps.OPTIONAL or item.module in deps.NEEDED_ONLY_BEFORE:
            continue
        dists = {_name(d) for d in providers.get(item.module, [])}
        if not dists & core:
            undeclared.append(f"{item.module} ({', '.join(sorted(dists)) or 'not installed'}) in {item.files}")
    assert not undeclared, "imported but not a core dependency: " + "; ".join(undeclared)


def test_each_optional_module_is_brought_by_the_extra_it_names() -> None:
    extras = {k: {_name(r) for r in v} for k, v in _project()["optional-dependencies"].items()}
    providers = metadata.packages_distributions()
    for module, (extra, cost) in deps.OPTIONAL.items():
        assert cost and extra in extras, module
        assert {_name(d) for d in providers.get(module, [])} & extras[extra], f"{module} not in [{extra}]"


def test_the_check_fails_where_a_core_module_is_missing(tmp_path: Path) -> None:
    """A real interpreter in which tree_sitter_cuda cannot be imported (as on a plain install before)."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tree_sitter_cuda':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli.deps", "--check"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MISSING tree_sitter_cuda: imported by engine/eval/build/split/parse.py" in done.stdout
    doctor = subprocess.run(
        [sys.executable, "-m", "tui.cli", "doctor", "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    assert checks["import tree_sitter_cuda"]["state"] == "missing"
    assert "core dependency" in checks["import tree_sitter_cuda"]["fix"]


def test_the_check_passes_on_this_install() -> None:
    assert deps.missing_core() == []
    assert deps.main(["--check"]) == 0
