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
    # built by the thread, from nothing, before the import asked: the import found it (no time compared)
    assert ext.prebuilt is True and ext.cached is False and ext.seconds > 0
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


# A task whose import waits for the prebuild thread to end: the reference stage then begins with the
# thread's outcome known, whatever the machine's load (no race between the two).
WAIT_FOR_THE_PREBUILD = (
    "import threading, time\n"
    "_deadline = time.monotonic() + 60\n"  # well inside the setup stage's limit
    "while any(t.name == 'cudaforge-prebuild' for t in threading.enumerate()) and time.monotonic() < _deadline:\n"
    "    time.sleep(0.02)\n"
)
RELU_TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
REFERENCE_FAILS = RELU_TASK.replace("return torch.relu(x)", 'raise RuntimeError("the reference ran")')
OWN_ERROR = PYBIND.replace("x[i] : 0.0f;", "x[i] : undeclared_in_its_own_code;")
# torch's stock layout (torch's headers, its binding generated from ``functions``)
STOCK_LAYOUT_OWN_ERROR = (EXAMPLES / "kernels" / "relu_cpu.py").read_text().replace(
    "o[i] = in[i] > 0.0f ? in[i] : 0.0f;", "o[i] = in[i] > 0.0f ? in[i] : undeclared_in_its_own_code;"
)
STOCK_CALL = 'ext = load_inline(name="cf_relu_pybind", cpp_sources=cpp_source, no_implicit_headers=True)'


@pytest.mark.parametrize("candidate", [OWN_ERROR, STOCK_LAYOUT_OWN_ERROR], ids=["pybind-only", "stock-layout"])
def test_a_compile_error_in_the_candidates_own_code_ends_the_evaluation_without_waiting_for_the_reference(
    ext_cache: Path, candidate: str
) -> None:
    """The prebuild thread's compile error in the candidate's own code is known before the reference is
    checked: the import that would fail comes first, so the verdict is the compiler's at once. Here the
    reference would have failed (a task error) had it been run first."""
    assert REFERENCE_FAILS != RELU_TASK and "undeclared_in_its_own_code" in candidate
    options = EvalOptions(device="cpu", cache_root=ext_cache, do_timing=False)  # a failed build is never cached
    result = evaluate(WAIT_FOR_THE_PREBUILD + REFERENCE_FAILS, candidate, options)
    assert result.status == "compile_error", result.messages
    assert "undeclared_in_its_own_code" in result.messages[0]
    assert (result.failed_side, result.task_error) == ("candidate", False)
    assert result.settings.get("reference_cut_short") is True


def _with_own_failure_caught(how: str) -> str:
    """PYBIND whose import first builds OWN_ERROR's source as ``cf_first_try`` and, when that fails, builds
    its own working source: ``how`` is "try" (a try around the first call) or "rebound" (torch's load_inline
    replaced, before it is imported by name, with a wrapper that catches: a reading of the source alone
    takes that call for one the import surely fails on)."""
    start = OWN_ERROR.index('r"""')
    broken = OWN_ERROR[start : OWN_ERROR.index('"""\n', start + 4) + 3]
    assert STOCK_CALL in PYBIND and "undeclared_in_its_own_code" in broken
    first = 'ext = load_inline(name="cf_first_try", cpp_sources=first_try, no_implicit_headers=True)'
    if how == "try":
        body = f"first_try = {broken}\ntry:\n    {first}\nexcept Exception:\n    {STOCK_CALL}\n"
        return PYBIND.replace(STOCK_CALL, body)
    wrapper = (
        "import torch.utils.cpp_extension as _ce\n"
        "_torchs = _ce.load_inline\n"
        "def _caught(**kwargs):\n"
        "    try:\n"
        "        return _torchs(**kwargs)\n"
        "    except Exception:\n"
        '        return _torchs(name="cf_relu_pybind", cpp_sources=cpp_source, no_implicit_headers=True)\n'
        "_ce.load_inline = _caught\n"
        "from torch.utils.cpp_extension import load_inline\n"
    )
    return PYBIND.replace("from torch.utils.cpp_extension import load_inline\n", "").replace(
        STOCK_CALL, f"{wrapper}first_try = {broken}\n{first}\n"
    )


def test_which_load_inline_calls_the_import_makes_for_sure_is_read_from_the_source() -> None:
    """Only a call the import surely makes may cut the reference check short when it fails in the
    candidate's own code: one in a try, a function or under a rebound name may never fail the import."""
    assert [c.certain for c in read_calls(PYBIND)] == [True]
    assert [(c.name, c.certain) for c in read_calls(_with_own_failure_caught("try"))] == [
        ("cf_first_try", False),
        ("cf_relu_pybind", False),
    ]
    own_function = PYBIND.replace("import load_inline\n", "import load_inline\ndef load_inline(**k):\n    return None\n", 1)
    assert own_function != PYBIND and [c.certain for c in read_calls(own_function)] == [False]
    aliased = PYBIND.replace("import load_inline\n", "import load_inline, load as load_inline\n", 1)
    assert aliased != PYBIND and [c.certain for c in read_calls(aliased)] == [False]


def test_a_candidate_that_catches_its_own_failed_build_in_a_try_has_the_reference_checked_first(ext_cache: Path) -> None:
    """An honest fallback (a try around a first, ambitious build) keeps the reference check first: a
    failing reference is then the task's, as for any candidate."""
    candidate = _with_own_failure_caught("try")
    options = EvalOptions(device="cpu", cache_root=ext_cache, do_timing=False)
    sound = evaluate(WAIT_FOR_THE_PREBUILD + RELU_TASK, candidate, options)
    assert sound.status == "correct", sound.messages
    assert "reference_cut_short" not in sound.settings
    failing = evaluate(WAIT_FOR_THE_PREBUILD + REFERENCE_FAILS, candidate, options)
    assert failing.status == "runtime_error" and (failing.failed_side, failing.task_error) == ("reference", True)


def test_a_candidate_that_fools_the_reading_of_its_source_has_the_reference_checked_after_its_import(
    ext_cache: Path,
) -> None:
    """A call that reads as one the import surely fails on, caught all the same (torch's load_inline
    rebound before it is imported by name): the import succeeds after the check was cut short, so the
    reference is checked after it, and what goes wrong there is the candidate's, its code having run
    first: a failure, and a crash, which the evaluating process blames by the stage's name."""
    candidate = _with_own_failure_caught("rebound")
    assert [(c.name, c.certain) for c in read_calls(candidate)][0] == ("cf_first_try", True)
    options = EvalOptions(device="cpu", cache_root=ext_cache, do_timing=False, static_guard=False)
    sound = evaluate(WAIT_FOR_THE_PREBUILD + RELU_TASK, candidate, options)
    assert sound.status == "correct", sound.messages
    assert sound.settings.get("reference_cut_short") is True and sound.settings.get("reference_after_import") is True
    failing = evaluate(WAIT_FOR_THE_PREBUILD + REFERENCE_FAILS, candidate, options)
    assert failing.status == "runtime_error" and (failing.failed_side, failing.task_error) == ("candidate", False)
    assert any("after the candidate's import" in m and "the reference ran" in m for m in failing.messages), failing.messages
    crashing = RELU_TASK.replace("return torch.relu(x)", "import os, signal\n        os.kill(os.getpid(), signal.SIGKILL)")
    assert crashing != RELU_TASK
    crashed = evaluate(WAIT_FOR_THE_PREBUILD + crashing, candidate, options)
    assert crashed.status != "correct" and (crashed.failed_side, crashed.task_error) == ("candidate", False), crashed.messages


@pytest.mark.gpu
def test_on_the_gpu_a_split_build_failing_in_the_candidates_own_code_cuts_the_reference_short(tmp_path: Path) -> None:
    """CUDA sources are built split, and the prebuild thread leaves a failed split to the import to judge
    again (and fall back from, were it the split's doing); a compile error in the candidate's own code is
    noted there all the same, so the reference (which would fail here) is not waited for."""
    from tests.test_build_failures import UNDEFINED_HELPER

    options = EvalOptions(device="cuda", trials=1, do_timing=False, cache_root=tmp_path)
    result = evaluate(WAIT_FOR_THE_PREBUILD + REFERENCE_FAILS, UNDEFINED_HELPER, options)
    assert result.status == "compile_error", result.messages
    assert [e.path for e in result.build.extensions] == ["split"] and "relu_helper_never_written" in result.messages[0]
    assert result.settings.get("reference_cut_short") is True
