"""Export one iteration's kernel as a standalone KernelBench ``ModelNew`` file.

The committed ``kernel.py`` already is a complete ``ModelNew`` module; the export adds a comment
header saying where it came from (session, branch, iteration, commit, status, speedup) so the
file still makes sense once it leaves the session. Only comments are added, placed after any
shebang or encoding line, so the file's behaviour is exactly the committed kernel's.
"""

from __future__ import annotations

import re

from sessions.errors import NoSuchIteration
from sessions.message import format_speedup
from sessions.records import Iteration
from sessions.repo import SessionRepo

_PRESERVED_FIRST_LINE = re.compile(r"^(#!|#.*coding[:=])")


def choose_iteration(repo: SessionRepo, iteration: int | None, branch: str | None) -> Iteration:
    """The requested iteration, or by default the branch's best correct one."""
    if iteration is not None:
        return repo.iteration(iteration, branch)
    best = repo.best(branch)
    if best is None:
        name = branch or repo.current_branch
        raise NoSuchIteration(
            f"session {repo.name} has no correct iteration on branch {name!r}; pass --iteration N"
        )
    return best


def export_text(repo: SessionRepo, item: Iteration, branch: str | None = None) -> str:
    """The kernel source of ``item`` with a provenance header."""
    source = item.kernel_source
    header = [
        "# Exported by cudaforge: a standalone KernelBench ModelNew file.",
        f"# session:   {repo.name} ({repo.path})",
        f"# task:      {repo.task_name}",
        f"# branch:    {branch or repo.current_branch}, iteration {item.number} (commit {item.sha[:12]})",
        f"# status:    {item.status}, speedup {format_speedup(item.speedup)}",
    ]
    lines = source.splitlines(keepends=True)
    keep = 0
    while keep < min(2, len(lines)) and _PRESERVED_FIRST_LINE.match(lines[keep]):
        keep += 1
    body = "".join(lines[keep:])
    return "".join(lines[:keep]) + "\n".join(header) + "\n\n" + body
