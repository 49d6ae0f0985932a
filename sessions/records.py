"""The two shapes an iteration takes: what a writer records, and what a reader gets back.

:class:`IterationRecord` is the input of :meth:`SessionRepo.record_iteration`.
:class:`Iteration` is one entry of a branch's history: its metadata comes from the commit's
subject and trailers (cheap: one ``git log`` lists them all), its files are read lazily from the
commit's tree only when asked for.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REQUIRED_FILES = ("task.py", "kernel.py", "eval.json", "transcript.jsonl", "session.toml")
OPTIONAL_FILES = ("profile.json", "suggestion.json")


@dataclass(frozen=True)
class IterationRecord:
    """One kernel version to commit.

    ``eval_result`` is the EvalResult JSON object: only its ``status`` and ``speedup`` keys are
    interpreted here. ``profile`` and ``suggestion`` are left out of the commit when None (the seed
    has no suggestion; a failed kernel has no profile). ``settings`` replaces the ``[settings]`` table
    of ``session.toml`` when given; otherwise the previous iteration's file is kept. ``extra_files``
    adds further text files (e.g. a build log) next to the standard ones. ``note`` becomes the
    commit body, between the subject and the trailers.
    """

    kernel_source: str
    eval_result: Mapping[str, Any]
    phase: str = "optimize"
    profile: Mapping[str, Any] | None = None
    suggestion: Mapping[str, Any] | None = None
    transcript: Sequence[Mapping[str, Any]] = ()
    coder: str = ""
    judge: str = ""
    tokens: int = 0
    cost_usd: float | None = None
    settings: Mapping[str, Any] | None = None
    extra_files: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class Iteration:
    """One committed kernel version of a branch, as read back from the repository."""

    number: int
    sha: str
    tree: str
    phase: str
    status: str
    speedup: float | None
    coder: str
    judge: str
    tokens: int
    cost_usd: float | None
    timestamp: dt.datetime
    subject: str
    _reader: Callable[[str, str], str] = field(repr=False, compare=False)
    _lister: Callable[[str], list[str]] = field(repr=False, compare=False)

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def files(self) -> list[str]:
        """Names of the files in this iteration's commit."""
        return self._lister(self.tree)

    def read_text(self, filename: str) -> str:
        """A file of this iteration (raises NoSuchFile when the commit lacks it)."""
        return self._reader(self.tree, filename)

    def read_json(self, filename: str) -> Any:
        return json.loads(self.read_text(filename))

    def read_optional_json(self, filename: str) -> Any:
        """Like :meth:`read_json` but None when the file is absent (``profile.json``, ``suggestion.json``)."""
        return self.read_json(filename) if filename in self.files() else None

    @property
    def kernel_source(self) -> str:
        return self.read_text("kernel.py")

    @property
    def eval_result(self) -> dict[str, Any]:
        return self.read_json("eval.json")

    @property
    def profile(self) -> dict[str, Any] | None:
        return self.read_optional_json("profile.json")

    @property
    def suggestion(self) -> dict[str, Any] | None:
        return self.read_optional_json("suggestion.json")

    @property
    def transcript(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.read_text("transcript.jsonl").splitlines() if line.strip()]
