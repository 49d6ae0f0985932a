"""The names a stock build's CUDA unit sees that a split build's does not: whatever torch's headers declare.

Why (ARCHITECTURE.md §3, "Builds"): a split build compiles the candidate's CUDA without torch's headers, so
nvcc's ``identifier "X" is undefined`` there may be the split's doing (``X`` comes from torch's headers, or
from something they include, such as ``CUDART_PI_F``), and the stock build is then tried. But most such
errors are the candidate's own: a helper it never wrote, a typo. Each cost a stock build (20-45 s on the
H200) before the verdict. This module answers whether torch could have declared ``X``: the stock unit's
prelude (torch's own ``#include``s for ``cuda_sources`` and ``torch/extension.h``) preprocessed once by nvcc
with every macro kept (``-dD``), its identifiers stored per torch, nvcc and include set in the build cache.
The prelude also has the torch, ATen, c10 and pybind11 headers the candidate's ``cuda_sources`` include
themselves (the split leaves exactly those out of its CUDA unit), and the macros torch puts on every build's command
line. When the answer cannot be had (no nvcc, a header missing), nothing is claimed and the stock build is
tried as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

# What a stock build's CUDA unit starts with (torch's load_inline writes the first three before the
# candidate's cuda_sources) and what candidates include: what a stock build may declare that a split lacks
PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n#include <torch/extension.h>\n"
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")
# the candidate's own includes the split leaves out of its CUDA unit (engine.eval.build.extension's rule)
_TORCH_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"](?:torch|ATen|c10|pybind11)/[^>\"]+[>\"]", re.MULTILINE)
COMMAND_LINE_MACROS = frozenset({"TORCH_EXTENSION_NAME", "TORCH_API_INCLUDE_EXTENSION_H"})
_READ: dict[Path, frozenset[str]] = {}  # this process's readings, by their cache file
PREPROCESS_TIMEOUT_S = 120.0


def nvcc_path() -> str | None:
    """The nvcc torch builds with (``CUDA_HOME``), else the one on PATH."""
    with contextlib.suppress(Exception):
        import torch.utils.cpp_extension as cpp_extension

        if cpp_extension.CUDA_HOME:
            candidate = Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc"
            if candidate.is_file():
                return str(candidate)
    return shutil.which("nvcc")


def _torch_includes() -> list[str]:
    import torch.utils.cpp_extension as cpp_extension

    return [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]


def torch_includes_of(cuda_text: str) -> list[str]:
    """The candidate's ``#include`` lines of torch, ATen, c10 and pybind11 headers, each once, in order."""
    return list(dict.fromkeys(line.strip() for line in _TORCH_INCLUDE.findall(cuda_text)))


def _cache_file(cache_root: Path, nvcc: str, prelude: str) -> Path:
    import torch

    real = os.path.realpath(nvcc)
    facts = [torch.__version__, str(Path(torch.__file__).parent), real, str(os.stat(real).st_mtime_ns), sys.executable, prelude]
    key = hashlib.sha256("\n".join(facts).encode()).hexdigest()[:20]
    return cache_root / "names" / f"torch-visible-{key}.txt"


def torch_visible_names(cache_root: Path, cuda_text: str = "") -> frozenset[str] | None:
    """Every identifier a stock build of ``cuda_text`` has from torch's headers (its own torch includes
    among them) and what they include, macros too; None when it cannot be known here."""
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    prelude = PRELUDE + "".join(f"{line}\n" for line in torch_includes_of(cuda_text))
    try:
        stored = _cache_file(cache_root, nvcc, prelude)
        if stored in _READ:  # a build with several undefined names asks once per name
            return _READ[stored]
        if stored.is_file():
            names = _READ[stored] = frozenset(stored.read_text().split())
            return names
        names = _preprocess(nvcc, _torch_includes(), prelude)
    except Exception:  # noqa: BLE001 - not knowing is answered by the stock build, as before
        return None
    if names is None:
        return None
    _READ[stored] = names
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next failure 2-3 s
        stored.parent.mkdir(parents=True, exist_ok=True)
        partial = stored.with_name(f"{stored.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # prebuild and import
        partial.write_text("\n".join(sorted(names)))
        partial.replace(stored)
    return names


def _preprocess(nvcc: str, includes: list[str], prelude: str) -> frozenset[str] | None:
    with tempfile.TemporaryDirectory(prefix="cf-names-") as folder:
        source = Path(folder) / "prelude.cu"
        source.write_text(prelude)
        command = [nvcc, "-E", "-x", "cu", "-std=c++17", "-Xcompiler", "-dD", *(f"-I{p}" for p in includes), str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=PREPROCESS_TIMEOUT_S, cwd=folder)
    if done.returncode != 0 or not done.stdout:
        return None
    return frozenset(_IDENTIFIER.findall(done.stdout)) | COMMAND_LINE_MACROS


def undefined_is_own(name: str, names: frozenset[str] | None, sources: str, split_cuda: str) -> bool:
    """True when nvcc's ``identifier "name" is undefined`` in a split unit would be the stock build's error
    too: torch's headers do not declare ``name`` (``names``), and every mention of it in the candidate's
    ``sources`` stayed in the split's CUDA unit (none was moved out with a host piece that may declare it)."""
    if names is None or name in names:
        return False
    word = re.compile(rf"\b{re.escape(name)}\b")
    return len(word.findall(sources)) == len(word.findall(split_cuda))
