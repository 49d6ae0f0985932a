"""Which files of a bench's TASKS arguments are tasks, and the session name each one gets.

A KernelBench level folder works as is: every ``*.py`` directly inside a folder is a candidate,
in name order, and one that is not a KernelBench task (no ``Model``/``get_inputs``/… or a syntax
error) is skipped with a note rather than failing the whole set. The check is static (no import),
so discovering a large folder is quick and runs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.tasks import TaskError, check_task_source
from sessions.paths import slugify


class BenchError(Exception):
    """A usage problem with the bench's arguments (missing paths, no task at all)."""


@dataclass(frozen=True)
class BenchTask:
    """A task file and the name of its session under ``OUT/sessions``."""

    name: str
    path: Path


def discover(paths: Sequence[Path]) -> tuple[list[BenchTask], list[str]]:
    """The tasks among ``paths`` (files, or folders of them) and one note per skipped file.

    Session names come from the file stems (slugified); two tasks with the same stem from
    different folders get ``-2``, ``-3`` … so every task keeps its own session.
    """
    candidates: list[Path] = []
    for path in paths:
        if path.is_dir():
            candidates.extend(sorted(p for p in path.iterdir() if p.suffix == ".py" and p.is_file()))
        elif path.is_file():
            candidates.append(path)
        else:
            raise BenchError(f"no such task file or folder: {path}")
    tasks: list[BenchTask] = []
    notes: list[str] = []
    seen_files: set[Path] = set()
    taken: set[str] = set()
    for path in candidates:
        resolved = path.resolve()
        if resolved in seen_files:
            continue
        seen_files.add(resolved)
        if path.name == "__init__.py":
            continue
        try:
            check_task_source(path.read_text(encoding="utf-8"), str(path))
        except (TaskError, UnicodeDecodeError) as error:
            notes.append(f"skipped {path}: not a KernelBench task ({error})")
            continue
        base = slugify(path.stem, fallback="task")
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name)
        tasks.append(BenchTask(name=name, path=resolved))
    if not tasks:
        raise BenchError("no KernelBench task among the given paths" + "".join(f"\n  {n}" for n in notes))
    return tasks, notes
