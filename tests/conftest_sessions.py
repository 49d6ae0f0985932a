"""Shared helpers for the session-repository tests (imported by tests/test_sessions*.py).

Everything here builds *real* things: bare git repositories through the public API, plain
``git`` subprocesses to read them back, Python subprocesses for writers that hold locks or get
killed. Nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

TASK_SOURCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Adds two tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(16, 16), torch.randn(16, 16)]


def get_init_inputs():
    return []
'''

KERNEL_SOURCE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Version {version}: the same sum, written as torch.add."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.add(a, b)
'''


def kernel(version: int) -> str:
    return KERNEL_SOURCE.replace("{version}", str(version))


def record_kwargs(
    version: int, status: str = "correct", speedup: float | None = 1.5, **extra: Any
) -> dict[str, Any]:
    """Keyword arguments of one plausible iteration."""
    fields: dict[str, Any] = {
        "kernel_source": kernel(version),
        "eval_result": {"status": status, "speedup": speedup, "stage": "time", "version": version},
        "phase": "seed" if version == 0 else "optimize",
        "transcript": [
            {
                "role": "coder",
                "model": "openai/o3",
                "messages": [{"role": "user", "content": "write it"}],
                "reply": f"kernel {version}",
                "usage": {"input_tokens": 10, "output_tokens": 20},
            },
        ],
        "coder": "openai/o3",
        "judge": "anthropic/claude-sonnet-4-5",
        "tokens": 30,
        "cost_usd": 0.0123,
    }
    fields.update(extra)
    return fields


def git(path: Path, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    """Run plain git in a session directory and return stdout."""
    result = subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def child_env(**extra: str) -> dict[str, str]:
    """Environment for Python subprocesses that import the package from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def spawn_python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``python -c code args…`` with stdout piped (line-buffered text)."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        env=env or child_env(),
        cwd=REPO_ROOT,
    )


def wait_for_line(proc: subprocess.Popen[str], expected: str) -> None:
    """Block until the child prints ``expected`` (or fail with its stderr)."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != expected:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"child printed {line!r} instead of {expected!r}; stderr:\n{err}")
