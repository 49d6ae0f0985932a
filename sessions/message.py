"""Commit messages of a session repository: the subject line and the ``Cudaforge-*`` trailers.

This is the contract other tools read (ARCHITECTURE.md §5), so it is kept in one place:

* iteration commit subject: ``iter 3 · optimize · 1.42x · correct`` — the speedup has two
  decimals and an ``x``; when there is none (the kernel failed, or was never timed) it is an em
  dash: ``iter 0 · seed · — · compile_error``;
* trailers (real git trailers: the last paragraph, ``Key: value``): ``Cudaforge-Iteration``,
  ``Cudaforge-Phase``, ``Cudaforge-Status``, ``Cudaforge-Speedup`` (4 decimals, or ``none``),
  ``Cudaforge-Coder``, ``Cudaforge-Judge`` (``none`` when not used), ``Cudaforge-Tokens`` (an
  integer), ``Cudaforge-Cost-USD`` (6 decimals, or ``none`` when unknown);
* session root commit subject: ``session · <task name>`` with ``Cudaforge-Session``,
  ``Cudaforge-Task`` and ``Cudaforge-Format`` trailers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PHASES = ("seed", "repair", "optimize", "human")
STATUSES = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected")
NO_SPEEDUP = "—"
NONE_VALUE = "none"
FORMAT_VERSION = "1"

T_ITERATION = "Cudaforge-Iteration"
T_PHASE = "Cudaforge-Phase"
T_STATUS = "Cudaforge-Status"
T_SPEEDUP = "Cudaforge-Speedup"
T_CODER = "Cudaforge-Coder"
T_JUDGE = "Cudaforge-Judge"
T_TOKENS = "Cudaforge-Tokens"
T_COST = "Cudaforge-Cost-USD"
T_SESSION = "Cudaforge-Session"
T_TASK = "Cudaforge-Task"
T_FORMAT = "Cudaforge-Format"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def one_line(text: str) -> str:
    """Collapse anything multi-line or control-character-laden into one safe line."""
    return _CONTROL.sub(" ", str(text)).strip()


def format_speedup(speedup: float | None) -> str:
    """``1.42x`` or the em dash used when there is no speedup."""
    return NO_SPEEDUP if speedup is None else f"{speedup:.2f}x"


def iteration_subject(iteration: int, phase: str, status: str, speedup: float | None) -> str:
    return f"iter {iteration} · {phase} · {format_speedup(speedup)} · {status}"


def root_subject(task_name: str) -> str:
    return f"session · {one_line(task_name)}"


def trailer_block(trailers: Mapping[str, str]) -> str:
    return "\n".join(f"{key}: {one_line(value) or NONE_VALUE}" for key, value in trailers.items())


def iteration_message(
    *,
    iteration: int,
    phase: str,
    status: str,
    speedup: float | None,
    coder: str,
    judge: str,
    tokens: int,
    cost_usd: float | None,
    body: str = "",
) -> str:
    """The full commit message of one iteration (subject, optional body, trailers)."""
    trailers = {
        T_ITERATION: str(iteration),
        T_PHASE: phase,
        T_STATUS: status,
        T_SPEEDUP: NONE_VALUE if speedup is None else f"{speedup:.4f}",
        T_CODER: coder or NONE_VALUE,
        T_JUDGE: judge or NONE_VALUE,
        T_TOKENS: str(int(tokens)),
        T_COST: NONE_VALUE if cost_usd is None else f"{cost_usd:.6f}",
    }
    parts = [iteration_subject(iteration, phase, status, speedup)]
    if body.strip():
        parts.append(body.strip())
    parts.append(trailer_block(trailers))
    return "\n\n".join(parts) + "\n"


def root_message(session_name: str, task_name: str) -> str:
    trailers = {T_SESSION: session_name, T_TASK: task_name, T_FORMAT: FORMAT_VERSION}
    return f"{root_subject(task_name)}\n\n{trailer_block(trailers)}\n"


def parse_trailer_lines(text: str) -> dict[str, str]:
    """Parse ``Key: value`` lines as printed by ``git log --format=%(trailers:only,unfold)``."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            result[key.strip()] = value.strip()
    return result


def parse_optional_float(value: str | None) -> float | None:
    if value is None or value in (NONE_VALUE, NO_SPEEDUP, ""):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def parse_int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default
