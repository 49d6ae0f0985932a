"""A reference library an earlier evaluation ran is loaded from the build cache, and only its very bytes
(engine/eval/build/trust.py, engine/eval/build/reference.py): real CPU evaluations, real extensions.

The best kernel here builds a pybind11-only extension (no torch headers: seconds to build on two cores)
whose ``gain()`` scales a ReLU by 1.0; the re-timing puts it in the reference's seat (engine.loop.duel).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from engine.eval.build.trust import library_digest, library_path, trusted_libraries
from engine.eval.evaluate import evaluate
from engine.eval.result import EvalResult
from engine.loop import duel
from tests.loop_helpers import RELU_TASK, fast_eval

pytestmark = pytest.mark.slow

GAIN_KERNEL = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <pybind11/pybind11.h>
double gain() { return 1.0; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gain", &gain); }
"""

ext = load_inline(name="cf_gain_ext", cpp_sources=cpp_source, no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * ext.gain()
'''
TWIN = GAIN_KERNEL.replace("import torch\n", "import torch\nTWIN = True\n", 1)


def options(cache: Path):  # timing only: the kernel is a carrier for its library, not a candidate
    return dataclasses.replace(fast_eval(cache), guards=False, static_guard=False)


def best_evaluated(cache: Path) -> EvalResult:
    best = evaluate(RELU_TASK.read_text(), GAIN_KERNEL, options(cache), task_name="relu")
    assert best.status == "correct", best.messages
    return best


def test_each_built_library_is_sealed_with_its_digest_by_the_evaluating_process(ext_cache: Path) -> None:
    [ext] = best_evaluated(ext_cache).build.extensions
    library = library_path(ext.build_dir, ext.name)
    assert ext.digest == hashlib.sha256(library.read_bytes()).hexdigest()


def test_a_retiming_loads_the_recorded_library_and_keeps_it_apart_from_the_candidates(ext_cache: Path) -> None:
    best = best_evaluated(ext_cache)
    result = duel.retime(evaluate, RELU_TASK.read_text(), TWIN, GAIN_KERNEL, options(ext_cache), "relu", best.to_dict())
    assert result.ok, result.messages
    [reference] = result.build.reference_extensions
    [candidate] = result.build.extensions
    assert reference.build_dir == best.build.extensions[0].build_dir and reference.cached
    assert candidate.build_dir == reference.build_dir  # the same sources: one folder, two seats, two records


def test_a_candidate_of_the_same_extension_name_built_first_does_not_move_the_reference_off_its_record(
    ext_cache: Path,
) -> None:
    # another source under the same name: the worker's prebuild thread builds it while the task is imported,
    # and torch's load_inline would then version the reference's name and load another file
    other = GAIN_KERNEL.replace("double gain() { return 1.0; }", "double gain() { return 2.0 / 2.0; }")
    best = best_evaluated(ext_cache)
    result = duel.retime(evaluate, RELU_TASK.read_text(), other, GAIN_KERNEL, options(ext_cache), "relu", best.to_dict())
    assert result.ok, result.messages
    assert [e.build_dir for e in result.build.reference_extensions] == [best.build.extensions[0].build_dir]
    assert result.build.extensions[0].build_dir != best.build.extensions[0].build_dir


def test_a_library_changed_since_its_record_is_built_in_a_folder_of_its_own(ext_cache: Path) -> None:
    record = best_evaluated(ext_cache).to_dict()
    record["build"]["extensions"][0]["digest"] = "0" * 64  # as if a later worker had rewritten the file
    result = duel.retime(evaluate, RELU_TASK.read_text(), TWIN, GAIN_KERNEL, options(ext_cache), "relu", record)
    assert result.ok, result.messages
    assert result.build.reference_extensions == []  # nothing taken from the cache
    [note] = result.build.reference_notes
    assert "'cf_gain_ext' was built in a folder of its own" in note and "changed since its evaluation recorded it" in note


def test_without_a_record_the_task_is_imported_as_it_always_was() -> None:
    assert trusted_libraries(None) == {} and duel.retiming_options(fast_eval(Path("."))).trusted_libraries == {}
    unsealed = {"build": {"extensions": [{"name": "x", "build_dir": "/c/x-1", "ok": True, "digest": None}]}}
    assert trusted_libraries(unsealed) == {}


def test_a_digest_is_read_only_from_a_regular_file_never_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    real = tmp_path / "lib.so"
    real.write_bytes(b"\x7fELF")
    (tmp_path / "link.so").symlink_to(real)
    os.mkfifo(tmp_path / "fifo.so")  # a reader of a FIFO with no writer would wait forever
    assert library_digest(real) == hashlib.sha256(b"\x7fELF").hexdigest()
    assert library_digest(tmp_path / "link.so") is None and library_digest(tmp_path / "fifo.so") is None
    assert library_digest(tmp_path / "missing.so") is None
