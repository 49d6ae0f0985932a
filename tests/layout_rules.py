"""The repository's shape, measured: import graph, cycles, module counts, long functions, doc links.

Why this exists: ARCHITECTURE.md §1 draws engine/ in layers whose imports only go down. A picture
drifts unless something reads the code, so this module reads it (``ast``, imports inside functions
included, since a lazy import hides a cycle rather than removing it) and ``tests/test_layout.py``
holds the rules. Run ``python tests/layout_rules.py`` for the layer-to-layer import picture and
every rule's current findings.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "sessions", "tui", "themes")
MAX_ENGINE_ROOT_MODULES = 8
MAX_FUNCTION_LINES = 80


def product_files() -> list[Path]:
    """Every product module (the Coder's templates are text shown to an LLM, not code we run)."""
    files: list[Path] = []
    for package in PACKAGES:
        files += [p for p in sorted((ROOT / package).rglob("*.py")) if "templates" not in p.parts]
    return files


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in product_files()}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` names (``engine.eval.result.EvalResult`` -> ``engine.eval.result``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join(anchor + ([base] if base else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """module -> the product modules it imports anywhere in its body (a package's ``__init__`` counts as itself)."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = {_resolve(n, known) for n in _imported_names(tree, module, path.name == "__init__.py")}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def _without_package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop edges to a module's own enclosing package: importing ``engine.eval.result`` runs
    ``engine/eval/__init__.py`` first, but Python resolves that order itself; such edges are not
    design cycles (a package ``__init__`` that re-exports its children would otherwise always be one)."""
    return {m: {t for t in targets if not m.startswith(t + ".")} for m, targets in graph.items()}


def cycles(graph: dict[str, set[str]] | None = None) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    graph = _without_package_edges(graph or import_graph())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    item = stack.pop()
                    on_stack.discard(item)
                    component.append(item)
                    if item == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def engine_root_modules() -> list[str]:
    """Modules directly in ``engine/`` (its ``__init__`` aside)."""
    return sorted(p.name for p in (ROOT / "engine").glob("*.py") if p.name != "__init__.py")


@dataclass(frozen=True)
class LongFunction:
    where: str
    name: str
    lines: int


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[LongFunction]:
    """Functions and methods longer than ``limit`` lines (decorators and docstring included)."""
    found: list[LongFunction] = []
    for path in product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.append(LongFunction(where, node.name, length))
    return sorted(found, key=lambda f: -f.lines)


DESIGN_CITATION = re.compile(r"\bDESIGN(?:\.md)?\s*§|\bDESIGN\.md\b|shared/DESIGN")


def design_citations(files: Iterable[Path] | None = None) -> list[str]:
    """``path:line`` of each reference to a DESIGN document (the repository's own is ARCHITECTURE.md)."""
    hits: list[str] = []
    for path in files if files is not None else product_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if DESIGN_CITATION.search(line):
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                hits.append(f"{where}:{number}")
    return hits


# A path ARCHITECTURE.md names: starts at a top-level folder of ours and ends in a file or folder name.
_PATH = re.compile(
    r"(?<![\w./-])((?:engine|sessions|tui|themes|tests|benchmarks|examples|\.ci)/[\w./*-]*[\w*/])"
)


def architecture_paths(text: str | None = None) -> list[str]:
    text = text if text is not None else (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return sorted(set(_PATH.findall(text)))


def missing_architecture_paths(text: str | None = None) -> list[str]:
    """Paths ARCHITECTURE.md names that do not exist (globs must match something)."""
    missing = []
    for name in architecture_paths(text):
        name = name.rstrip("/")
        if any(ch in name for ch in "*?["):
            if not list(ROOT.glob(name)):
                missing.append(name)
        elif not (ROOT / name).exists():
            missing.append(name)
    return missing


ARCHITECTURE_SECTION = re.compile(r"ARCHITECTURE(?:\.md)?\s*§\s*(\d+)")


def architecture_sections(text: str | None = None) -> set[str]:
    text = text if text is not None else (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return set(re.findall(r"^##\s+(\d+)\b", text, flags=re.MULTILINE))


def dangling_section_citations() -> list[str]:
    """``path:line §N`` for each docstring citing an ARCHITECTURE.md section that does not exist."""
    sections = architecture_sections()
    bad = []
    for path in product_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for section in ARCHITECTURE_SECTION.findall(line):
                if section not in sections:
                    bad.append(f"{path.relative_to(ROOT)}:{number} §{section}")
    return bad


def layer_of(module: str) -> str:
    """The layer a module belongs to: its package two levels down (``engine.eval``), or ``engine`` root."""
    parts = module.split(".")
    if parts[0] != "engine" or len(parts) == 1:
        return parts[0]
    if len(parts) == 2 and not (ROOT / "engine" / parts[1]).is_dir():
        return "engine (root)"
    return ".".join(parts[:2])


def layer_picture(graph: dict[str, set[str]] | None = None) -> dict[str, dict[str, int]]:
    """layer -> {imported layer: number of module-to-module imports}."""
    graph = graph or import_graph()
    picture: dict[str, dict[str, int]] = {}
    for module, targets in graph.items():
        source = layer_of(module)
        row = picture.setdefault(source, {})
        for target in targets:
            layer = layer_of(target)
            if layer != source:
                row[layer] = row.get(layer, 0) + 1
    return picture



# ARCHITECTURE.md §1: the layers, lowest first. A module belongs to the layer of its longest matching
# prefix; imports may stay in a layer or go down, never up. Contracts are what every part may read:
# the settings, the task format, the loop's events, the result, the names of guard rules and policies.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "contracts",
        (
            "engine.config", "engine.tasks", "engine.events", "engine.activity", "engine.approval", "engine.data",
            "engine.eval.result", "engine.eval.tolerances", "engine.eval.bootstrap", "engine.guard.rules",
            "engine.llm.errors", "engine.llm.settings", "sessions", "themes",
        ),
    ),
    ("services", ("engine.eval", "engine.guard", "engine.sandbox", "engine.profile", "engine.agents", "engine.llm",
                  "engine.procgroups")),
    ("batch and loop", ("engine.batch", "engine.bench", "engine.evalset", "engine.explore", "engine.loop", "engine.model")),
    ("commands", ("engine.cli", "tui")),
)  # fmt: skip


def layer_rank(module: str) -> tuple[int, str]:
    """(rank, layer name) of ``module``: the layer whose listed prefix matches it most closely."""
    best: tuple[int, int, str] | None = None
    for rank, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), rank, name)
    if best is None:
        raise KeyError(f"{module} is in no layer of LAYERS")
    return best[1], best[2]


def upward_imports(graph: dict[str, set[str]] | None = None) -> list[str]:
    """``a -> b`` for each import from a lower layer into a higher one (package ``__init__`` edges aside)."""
    graph = _without_package_edges(graph or import_graph())
    bad = []
    for module, targets in sorted(graph.items()):
        if module == "engine":
            continue
        rank, name = layer_rank(module)
        for target in sorted(targets):
            if target == "engine":
                continue
            target_rank, target_name = layer_rank(target)
            if target_rank > rank:
                bad.append(f"{module} ({name}) -> {target} ({target_name})")
    return bad


def layers_picture(graph: dict[str, set[str]] | None = None) -> dict[str, dict[str, int]]:
    """layer -> {layer it imports: number of module-to-module imports}, by the layers of LAYERS."""
    graph = _without_package_edges(graph or import_graph())
    picture: dict[str, dict[str, int]] = {name: {} for name, _ in LAYERS}
    for module, targets in graph.items():
        if module == "engine":
            continue
        source = layer_rank(module)[1]
        for target in targets:
            if target == "engine":
                continue
            layer = layer_rank(target)[1]
            picture[source][layer] = picture[source].get(layer, 0) + 1
    return picture


def main() -> int:
    graph = import_graph()
    print("# layers (ARCHITECTURE.md §1): layer -> layers it imports, with the number of module imports")
    for layer, row in layers_picture(graph).items():
        targets = ", ".join(f"{t} {n}" for t, n in row.items()) or "-"
        print(f"{layer:16} -> {targets}")
    print(f"# imports up the layers: {len(upward_imports(graph))}")
    for line in upward_imports(graph):
        print("  " + line)
    print("\n# packages: package -> packages it imports, with the number of module imports")
    for layer, row in sorted(layer_picture(graph).items()):
        targets = ", ".join(f"{t} {n}" for t, n in sorted(row.items())) or "-"
        print(f"{layer:24} -> {targets}")
    print(f"\n# cycles: {len(cycles(graph))}")
    for component in cycles(graph):
        print("  " + " <-> ".join(component))
    roots = engine_root_modules()
    print(f"\n# modules directly in engine/: {len(roots)} (at most {MAX_ENGINE_ROOT_MODULES})")
    print("  " + " ".join(roots))
    longs = long_functions()
    print(f"\n# functions over {MAX_FUNCTION_LINES} lines: {len(longs)}")
    for f in longs:
        print(f"  {f.lines:4} {f.where} {f.name}")
    print(f"\n# DESIGN citations: {len(design_citations())}")
    for hit in design_citations():
        print("  " + hit)
    print(f"\n# missing ARCHITECTURE.md paths: {missing_architecture_paths()}")
    print(f"# dangling ARCHITECTURE § citations: {dangling_section_citations()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
