"""What cudaforge's code imports, against what an install provides (ARCHITECTURE.md §10).

Why this exists: the split build imported ``tree_sitter_cuda`` lazily, inside a function, and the
grammar came only with the ``syntax`` extra; a plain ``pip install -e .`` on a GPU box then failed
every stock-layout kernel with ``ModuleNotFoundError``, and the kernel was blamed. A lazy import
is invisible until the line runs, so the check here reads the source instead: every ``import`` in
``engine/``, ``sessions/`` and ``tui/`` (function bodies included) must name the standard library,
cudaforge itself, a core dependency, or a module listed in :data:`OPTIONAL` with the extra that
brings it and what is lost without it. ``cudaforge doctor`` reports the gaps of this install;
``python -m engine.cli.deps --check`` (CI's core-only job) exits 1 when a non-optional import is missing.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_PACKAGES = ("engine", "sessions", "tui", "themes")

# Importable modules that only some features use: module -> (extra, what is lost without it).
OPTIONAL: dict[str, tuple[str, str]] = {
    "tree_sitter_cpp": ("syntax", "the kernel pane shows C++/CUDA without highlighting"),
    "tree_sitter_python": ("syntax", "the kernel pane shows Python without highlighting"),
    "textual_serve": ("serve", "no `--serve` (the TUI in a browser)"),
    "ray": ("ray", "no `bench --ray` / `evalset --ray`"),
    "matplotlib": ("plots", "the bench and evalset write no PNG plots (their CSV/JSON are unchanged)"),
}
# Fallbacks imported only where the standard library lacks the module (``tomllib`` arrived in 3.11).
NEEDED_ONLY_BEFORE = {"tomli": (3, 11)}


@dataclass(frozen=True)
class Import:
    """One top-level module name and the cudaforge files that import it."""

    module: str
    files: tuple[str, ...]


def _python_files(packages: Iterable[str] = OUR_PACKAGES) -> list[Path]:
    files: list[Path] = []
    for package in packages:
        folder = ROOT / package
        if folder.is_dir():
            # templates are files shown to the Coder, not code cudaforge runs
            files += [p for p in sorted(folder.rglob("*.py")) if "templates" not in p.parts]
    return files


def imported_modules(packages: Iterable[str] = OUR_PACKAGES) -> list[Import]:
    """Every absolute top-level module imported anywhere in ``packages`` (lazy imports included)."""
    found: dict[str, set[str]] = {}
    for path in _python_files(packages):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return [Import(module, tuple(sorted(files))) for module, files in sorted(found.items())]


def third_party(imports: Iterable[Import]) -> list[Import]:
    """The imports that are neither the standard library nor cudaforge's own packages."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return [i for i in imports if i.module not in stdlib and i.module not in OUR_PACKAGES]


def available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_core(packages: Iterable[str] = OUR_PACKAGES) -> list[Import]:
    """Non-optional imports this install cannot satisfy: a broken install (or a missing core dependency)."""
    return [
        i
        for i in third_party(imported_modules(packages))
        if i.module not in OPTIONAL and needed_here(i.module) and not available(i.module)
    ]


def needed_here(module: str) -> bool:
    """False for a fallback this Python version does not use (``tomli`` on 3.11+)."""
    before = NEEDED_ONLY_BEFORE.get(module)
    return before is None or sys.version_info[:2] < before


def missing_optional() -> list[tuple[str, str, str]]:
    """``(module, extra, what is lost)`` for each optional module this install lacks."""
    return [(m, extra, cost) for m, (extra, cost) in OPTIONAL.items() if not available(m)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.cli.deps", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a non-optional import is missing")
    args = parser.parse_args(argv)
    core = missing_core()
    for item in core:
        print(f"MISSING {item.module}: imported by {', '.join(item.files)}")
    for module, extra, cost in missing_optional():
        print(f"optional {module} (extra '{extra}') not installed: {cost}")
    if not core:
        count = len(third_party(imported_modules()))
        print(f"ok: every non-optional third-party import ({count} modules) is importable")
    return 1 if core and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
