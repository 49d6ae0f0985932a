"""Which (task, kernel) pairs the arguments of ``cudaforge evalset`` name, and what was left out.

Three input forms, told apart by what is on disk (no import, nothing runs):

* **a pairs folder**: sub-folders ``<name>/task.py`` + ``<name>/kernel.py`` (or one such
  ``<name>`` folder itself);
* **a KernelBench layout**: a tasks folder (``KernelBench/level1``: ``19_ReLU.py`` …) followed by
  one or more kernels folders whose files are matched to tasks by problem id
  (``level_1_problem_19_sample_0_kernel.py``, ``l1_p19…``, ``19_…``) or by the task's file name;
* **a TSV file**: ``task<TAB>kernel[<TAB>name]`` per line, paths relative to the file.

Nothing is dropped silently: a half pair, a kernel with no task, a task with no kernel, a missing
file or a file that is not a task is a :class:`Skipped` entry with the reason, printed at the start
and kept in ``summary.json``. Arguments that cannot be read at all (no such path, a malformed TSV
line, a kernels folder with no tasks folder before it) are an :class:`EvalsetError` (exit 2).

Each pair gets a name (its result file is ``OUT/results/<name>.json``) and, where the file names
say so, its KernelBench level / problem id / sample id, which the KernelBench-compatible results
file needs.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.tasks import TaskError, check_task_source
from sessions.paths import slugify


class EvalsetError(Exception):
    """A usage problem with the arguments; the message says which path and why."""


@dataclass(frozen=True)
class Pair:
    """One kernel to judge against one task."""

    name: str
    task: Path
    kernel: Path
    level: int | None = None
    problem_id: int | None = None
    sample_id: int | None = None


@dataclass(frozen=True)
class Skipped:
    """Something in the inputs that is not judged, and why."""

    path: str
    why: str


@dataclass
class Discovery:
    pairs: list[Pair] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


_KB_NAME = re.compile(r"level_?(\d+)_problem_?(\d+)(?:_sample_?(\d+))?", re.IGNORECASE)
_SHORT_NAME = re.compile(r"(?:^|[^a-z0-9])l(\d+)_p(\d+)(?:_s(\d+))?(?![0-9])", re.IGNORECASE)
_LEADING_ID = re.compile(r"^(\d+)_")
_LEVEL_FOLDER = re.compile(r"level_?(\d+)$", re.IGNORECASE)


def parse_ids(text: str) -> tuple[int | None, int | None, int | None]:
    """(level, problem id, sample id) named by a file or folder name; None where it says nothing."""
    for pattern in (_KB_NAME, _SHORT_NAME):
        match = pattern.search(text)
        if match:
            sample = match.group(3)
            return int(match.group(1)), int(match.group(2)), int(sample) if sample is not None else None
    match = _LEADING_ID.match(text)
    if match:
        return None, int(match.group(1)), None
    return None, None, None


def canonical_name(level: int | None, problem: int, sample: int | None) -> str:
    """KernelBench's own naming of a sample (``level_1_problem_19_sample_0``)."""
    prefix = f"level_{level}_" if level is not None else ""
    return f"{prefix}problem_{problem}_sample_{sample or 0}"


def _top_level_names(path: Path) -> set[str] | None:
    """Names a .py file defines at the top level; None when it cannot be parsed."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _python_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix == ".py" and p.name != "__init__.py"
    )


def _is_pairs_folder(folder: Path) -> bool:
    return any(
        (sub / "task.py").is_file() or (sub / "kernel.py").is_file()
        for sub in folder.iterdir()
        if sub.is_dir()
    )


def _folder_kind(folder: Path) -> str:
    """``pair``, ``pairs``, ``tasks`` or ``kernels``; raises for a folder that is none of them."""
    if (folder / "task.py").is_file() and (folder / "kernel.py").is_file():
        return "pair"
    if _is_pairs_folder(folder):
        return "pairs"
    files = _python_files(folder)
    if not files:
        raise EvalsetError(
            f"{folder}: no pairs (<name>/task.py + <name>/kernel.py) and no .py files: nothing to judge"
        )
    kernels = tasks = 0
    for path in files:
        names = _top_level_names(path) or set()
        if "ModelNew" in names:
            kernels += 1
        elif {"Model", "get_inputs", "get_init_inputs"} <= names:
            tasks += 1
    if kernels and not tasks:
        return "kernels"
    if tasks and not kernels:
        return "tasks"
    if kernels and tasks:
        raise EvalsetError(
            f"{folder}: mixes task files (class Model) and kernel files (class ModelNew); "
            "give the tasks folder and the kernels folder as two arguments"
        )
    raise EvalsetError(f"{folder}: none of its .py files is a KernelBench task or a kernel (ModelNew)")


def _pairs_folder(folder: Path, found: Discovery, names: list[tuple[str, Pair]]) -> None:
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        task, kernel = sub / "task.py", sub / "kernel.py"
        if task.is_file() and kernel.is_file():
            level, problem, sample = parse_ids(sub.name)
            names.append((sub.name, Pair(sub.name, task, kernel, level, problem, sample)))
        elif task.is_file() or kernel.is_file():
            missing = "kernel.py" if task.is_file() else "task.py"
            found.skipped.append(
                Skipped(str(sub), f"no {missing} beside its {'task.py' if task.is_file() else 'kernel.py'}")
            )
        else:
            found.skipped.append(Skipped(str(sub), "neither task.py nor kernel.py in it"))


@dataclass
class _TaskIndex:
    """The tasks of one KernelBench tasks folder, by (level, problem id) and by file stem.

    A task's level comes from its own name (``l2_p19.py``) or else from the folder's
    (``level2``), so one folder may hold several levels, as the leaderboard's ``problems`` does.
    """

    folder: Path
    level: int | None
    by_id: dict[tuple[int | None, int], Path] = field(default_factory=dict)
    by_stem: dict[str, Path] = field(default_factory=dict)
    levels: dict[Path, int | None] = field(default_factory=dict)
    matched: set[Path] = field(default_factory=set)

    @classmethod
    def of(cls, folder: Path, found: Discovery) -> _TaskIndex:
        level_match = _LEVEL_FOLDER.search(folder.name)
        index = cls(folder, int(level_match.group(1)) if level_match else None)
        for path in _python_files(folder):
            names = _top_level_names(path) or set()
            if not {"Model", "get_inputs", "get_init_inputs"} <= names:
                found.skipped.append(
                    Skipped(str(path), "not a KernelBench task (no Model/get_inputs/get_init_inputs)")
                )
                continue
            level, problem, _ = parse_ids(path.stem)
            level = level if level is not None else index.level
            index.by_stem[path.stem] = path
            index.levels[path] = level
            if problem is None:
                continue
            if (level, problem) in index.by_id:
                other = index.by_id[(level, problem)].name
                found.skipped.append(
                    Skipped(
                        str(path), f"problem id {problem} is also {other}: kernels reach it by file name only"
                    )
                )
            else:
                index.by_id[(level, problem)] = path
        if not index.by_stem:
            raise EvalsetError(f"{folder}: no KernelBench task in this tasks folder")
        return index

    def match(self, kernel: Path, found: Discovery) -> Pair | None:
        stem = kernel.stem
        for suffix in ("", "_kernel", "_new", "_solution"):
            base = stem[: -len(suffix)] if suffix and stem.endswith(suffix) else stem
            if base in self.by_stem:
                task = self.by_stem[base]
                _, problem, sample = parse_ids(stem)
                _, task_problem, _ = parse_ids(task.stem)
                self.matched.add(task)
                level = self.levels[task]
                problem = task_problem if task_problem is not None else problem
                name = canonical_name(level, problem, sample) if problem is not None else base
                return Pair(name, task, kernel, level, problem, sample if problem is not None else None)
        level, problem, sample = parse_ids(stem)
        if problem is None:
            found.skipped.append(
                Skipped(
                    str(kernel), f"no problem id in its name and no task named {stem}.py in {self.folder}"
                )
            )
            return None
        same_id = {key: path for key, path in self.by_id.items() if key[1] == problem}
        fitting = {k: p for k, p in same_id.items() if level is None or k[0] is None or k[0] == level}
        if len(fitting) != 1:
            if len(fitting) > 1:
                why = f"problem id {problem} is in levels {sorted(k[0] for k in fitting)} of {self.folder}: name the level"
            elif same_id:
                held = ", ".join(str(k[0]) for k in sorted(same_id, key=str))
                why = (
                    f"a level {level} kernel, but {self.folder} holds problem {problem} at level {held} only"
                )
            else:
                why = f"no task with problem id {problem} in {self.folder}"
            found.skipped.append(Skipped(str(kernel), why))
            return None
        (task_level, _), task = next(iter(fitting.items()))
        self.matched.add(task)
        level = level if level is not None else task_level
        return Pair(canonical_name(level, problem, sample), task, kernel, level, problem, sample or 0)


def _kernels_folder(folder: Path, index: _TaskIndex, found: Discovery, names: list[tuple[str, Pair]]) -> None:
    for kernel in _python_files(folder):
        defined = _top_level_names(kernel)
        # a kernel with a syntax error is still judged (a compile_error); only a file that is
        # clearly not a kernel is skipped
        if defined is not None and "ModelNew" not in defined:
            found.skipped.append(Skipped(str(kernel), "defines no class ModelNew: not a kernel"))
            continue
        pair = index.match(kernel, found)
        if pair is not None:
            names.append((pair.name, pair))


def _tsv(path: Path, found: Discovery, names: list[tuple[str, Pair]]) -> None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise EvalsetError(f"{path}: cannot be read as a TSV ({error})") from None
    base = path.parent
    rows = 0
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if number == 1 and cells[0].lower() in ("task", "task_path"):
            continue  # a header line
        if len(cells) not in (2, 3) or not all(cells):
            raise EvalsetError(
                f"{path}:{number}: expected 'task<TAB>kernel' or 'task<TAB>kernel<TAB>name', got {line!r}"
            )
        rows += 1
        task, kernel = (Path(c) if Path(c).is_absolute() else base / c for c in cells[:2])
        missing = [str(p) for p in (task, kernel) if not p.is_file()]
        if missing:
            found.skipped.append(Skipped(f"{path}:{number}", "no such file: " + ", ".join(missing)))
            continue
        level, problem, sample = parse_ids(kernel.stem)
        if problem is None:
            level, problem, sample = parse_ids(task.stem)
        if len(cells) == 3:
            name = cells[2]
        elif problem is not None:
            name = canonical_name(level, problem, sample)
        else:
            name = kernel.stem
        names.append((name, Pair(name, task, kernel, level, problem, sample)))
    if not rows:
        raise EvalsetError(f"{path}: no 'task<TAB>kernel' line in this TSV")


def _check_tasks(found: Discovery, pairs: list[Pair]) -> list[Pair]:
    """Drop pairs whose task is broken (syntax error, a required name missing): it is not the kernel's fault."""
    good: list[Pair] = []
    verdicts: dict[Path, str | None] = {}
    for pair in pairs:
        if pair.task not in verdicts:
            try:
                check_task_source(pair.task.read_text(encoding="utf-8"), str(pair.task))
                verdicts[pair.task] = None
            except (TaskError, UnicodeDecodeError) as error:
                verdicts[pair.task] = str(error)
        if verdicts[pair.task] is None:
            good.append(pair)
        else:
            found.skipped.append(Skipped(str(pair.kernel), f"its task is broken: {verdicts[pair.task]}"))
    return good


def _unique(named: list[tuple[str, Pair]], found: Discovery) -> list[Pair]:
    """File-safe, unique names (a clash gets ``-2``, ``-3`` … in argument order, so reruns agree)."""
    taken: set[str] = set()
    pairs = []
    for raw, pair in named:
        base = slugify(raw, fallback="pair")
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        pairs.append(
            Pair(
                name, pair.task.resolve(), pair.kernel.resolve(), pair.level, pair.problem_id, pair.sample_id
            )
        )
    return pairs


def _finish(index: _TaskIndex | None, used: bool, found: Discovery) -> None:
    """Close a tasks folder: it must have had a kernels folder; its tasks without a kernel are listed."""
    if index is None:
        return
    if not used:
        raise EvalsetError(f"{index.folder}: a tasks folder needs a kernels folder after it")
    unmatched = sorted(set(index.by_stem.values()) - index.matched)
    found.skipped.extend(Skipped(str(t), "no kernel for this task") for t in unmatched)


def discover(arguments: Sequence[Path]) -> Discovery:
    """The pairs that ``arguments`` name, in argument order, and everything skipped with its reason."""
    found = Discovery()
    named: list[tuple[str, Pair]] = []
    index: _TaskIndex | None = None
    index_used = False
    for argument in arguments:
        if argument.is_file():
            if argument.suffix == ".py":
                raise EvalsetError(
                    f"{argument}: a single .py file; give a pairs folder, a tasks folder and a kernels folder, "
                    "or a TSV (for one pair use cudaforge eval TASK.py KERNEL.py)"
                )
            _tsv(argument, found, named)
            continue
        if not argument.is_dir():
            raise EvalsetError(f"no such file or folder: {argument}")
        kind = _folder_kind(argument)
        if kind == "pair":  # one pair's own folder
            level, problem, sample = parse_ids(argument.resolve().name)
            pair = Pair(
                argument.resolve().name, argument / "task.py", argument / "kernel.py", level, problem, sample
            )
            named.append((pair.name, pair))
        elif kind == "pairs":
            _pairs_folder(argument, found, named)
        elif kind == "tasks":
            _finish(index, index_used, found)
            index, index_used = _TaskIndex.of(argument, found), False
        else:
            if index is None:
                raise EvalsetError(
                    f"{argument}: a kernels folder needs its KernelBench tasks folder before it "
                    "(e.g. cudaforge evalset KernelBench/level1 runs/my_run --out DIR)"
                )
            _kernels_folder(argument, index, found, named)
            index_used = True
    _finish(index, index_used, found)
    found.pairs = _check_tasks(found, _unique(named, found))
    if not found.pairs:
        reasons = "".join(f"\n  {s.path}: {s.why}" for s in found.skipped[:20])
        raise EvalsetError("no (task, kernel) pair among the given paths" + reasons)
    return found
