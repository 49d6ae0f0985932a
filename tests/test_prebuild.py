"""The candidate's extensions built while the reference is checked (engine/eval/build/prebuild.py).

Reading the calls is pure (no candidate code runs); the end-to-end test builds the pybind11-only ReLU
(seconds) behind a task whose import takes two seconds, so the prebuild has something to hide behind.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.eval.build.prebuild import Prebuilt, prebuilding, read_calls
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from tests.conftest import EXAMPLES

PYBIND = (Path(__file__).resolve().parent / "fixtures" / "build" / "relu_pybind_only.py").read_text()


def test_a_call_of_literals_and_names_bound_once_is_read_as_the_import_will_make_it() -> None:
    source = '''
from torch.utils.cpp_extension import load_inline
import torch.utils.cpp_extension as ce
head = "#include <cuda_runtime.h>\\n"
cuda_src = head + """__global__ void k() {}"""
cpp_src = f"void f();"
FLAGS = ["-O3"]
ext = load_inline(name="ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["f"], extra_cuda_cflags=FLAGS, verbose=True)
other = ce.load_inline("two", [cpp_src], None, extra_cflags=[""])
class ModelNew:
    def __init__(self):
        self.ext = load_inline(name="lazy", cpp_sources=cpp_src)
'''
    calls = {c.name: c for c in read_calls(source)}
    assert set(calls) == {"ext", "two", "lazy"}
    ext = calls["ext"]
    assert ext.cuda_sources == '#include <cuda_runtime.h>\n__global__ void k() {}' and ext.cpp_sources == "void f();"
    assert ext.kwargs == {"functions": ["f"], "extra_cuda_cflags": ["-O3"], "verbose": True}
    assert calls["two"].cpp_sources == ["void f();"] and calls["two"].kwargs == {"extra_cflags": [""]}


@pytest.mark.parametrize(
    "source",
    [
        # a name bound twice, or changed after
        'src = "a"\nsrc = src + "b"\nload_inline(name="e", cpp_sources=src)',
        'src = "a"\nsrc += "b"\nload_inline(name="e", cpp_sources=src)',
        # computed at run time
        'import os\nload_inline(name=os.environ["X"], cpp_sources="int f();")',
        'def build(n):\n    return load_inline(name=f"e{n}", cpp_sources="int f();")',
        'src = "int f();"\ndef build(src):\n    return load_inline(name="e", cpp_sources=src)',
        # headers the import might write first, or include folders of its own
        'load_inline(name="e", cpp_sources=\'#include "mine.h"\')',
        'load_inline(name="e", cpp_sources="int f();", extra_include_paths=["/tmp"])',
        # arguments the reader cannot see
        'args = {"name": "e"}\nload_inline(cpp_sources="int f();", **args)',
        'load_inline("e", "int f();", None, None, ["f"])',
    ],
)
def test_a_call_the_source_alone_does_not_decide_is_left_to_the_import(source: str) -> None:
    assert read_calls(source) == []


def test_torchs_library_import_stops_in_the_prebuild_thread_only() -> None:
    """Where torch would load the library it built, the prebuild thread stops: nothing is loaded there."""
    import torch.utils.cpp_extension as cpp_extension

    from engine.eval.build.extension import BuildRecorder

    BuildRecorder(Path("/nonexistent")).attach()  # the patch, as the worker's recorders apply it
    seen: list[str] = []

    def in_thread() -> None:
        from engine.eval.build import prebuild

        prebuild._IN_PREBUILD.active = True
        try:
            cpp_extension._import_module_from_library("x", "/nonexistent", True)
        except Prebuilt:
            seen.append("stopped")
        finally:
            prebuild._IN_PREBUILD.active = False

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert seen == ["stopped"] and not prebuilding()
    with pytest.raises(Exception) as raised:  # outside the thread it is torch's own import again
        cpp_extension._import_module_from_library("x", "/nonexistent", True)
    assert not isinstance(raised.value, Prebuilt)


@pytest.mark.slow
def test_the_build_runs_while_the_task_is_set_up_and_the_import_finds_it_done(tmp_path: Path) -> None:
    task = (EXAMPLES / "tasks" / "relu.py").read_text().replace("import torch\n", "import time\nimport torch\ntime.sleep(2.0)\n", 1)
    assert "time.sleep(2.0)" in task
    options = EvalOptions(device="cpu", cache_root=tmp_path, do_timing=False)
    result = evaluate(task, PYBIND, options)
    assert result.status == "correct", result.messages
    [ext] = result.build.extensions
    assert ext.prebuilt is True and ext.cached is False and ext.seconds > 0
    # the import waited for what was left of the compile, or found it done: less than the compile took
    assert result.durations["build"] < ext.seconds, (result.durations, ext.seconds)
    again = evaluate(task, PYBIND, options)  # built before: a cache hit, not a prebuild of this evaluation
    assert again.build.extensions[0].cached is True and again.build.extensions[0].prebuilt is False


def test_a_build_that_failed_ahead_of_the_import_keeps_the_compilers_words_in_the_build_log(tmp_path: Path) -> None:
    """The prebuild thread can fail before the build stage begins (on a GPU box the reference stage takes
    seconds; here the task waits for the thread to end): the import then refuses the remembered failure
    at once, and the build log must still hold what the compiler said, not only that it was not built again."""
    wait = (
        "import threading, time\n"
        "_deadline = time.monotonic() + 120\n"
        "while any(t.name == 'cudaforge-prebuild' for t in threading.enumerate()) and time.monotonic() < _deadline:\n"
        "    time.sleep(0.02)\n"
        "print('the task speaks while it is imported', flush=True)\n"
    )
    task = wait + (EXAMPLES / "tasks" / "relu.py").read_text()
    broken = PYBIND.replace("x[i] : 0.0f;", "x[i] : undeclared_before_the_import;")
    assert broken != PYBIND
    result = evaluate(task, broken, EvalOptions(device="cpu", cache_root=tmp_path, do_timing=False))
    assert result.status == "compile_error", result.messages
    assert [ext.prebuilt for ext in result.build.extensions] == [True]  # the failure was the thread's
    assert "undeclared_before_the_import" in result.build.log, result.build.log
    assert "the task speaks" not in result.build.log  # the build's words only, not the stages before it
    assert "\x1e" not in result.build.log + result.stderr_tail  # the worker's stage marks are not shown
    assert "undeclared_before_the_import" in result.messages[0]
