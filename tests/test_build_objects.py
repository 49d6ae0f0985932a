"""Compiled units reused across builds (engine/eval/build/objects.py), on CPU with real builds.

The real builds use the pybind11-only ReLU (seconds per compile, no torch headers): a binding the same
but for a link flag lands in a new build directory, as a binding unchanged by a CUDA-side edit does on
a GPU machine, and must not be compiled again; a different extension name must be (the binding names
the module).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.eval.build.objects import Edge, ObjectCache, expand, parse_ninja
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from engine.eval.timing import TimingPlan
from tests.conftest import EXAMPLES

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
PYBIND = (Path(__file__).resolve().parent / "fixtures" / "build" / "relu_pybind_only.py").read_text()
CALL = 'ext = load_inline(name="cf_relu_pybind", cpp_sources=cpp_source, no_implicit_headers=True)'
assert CALL in PYBIND


def variant(name: str = "cf_relu_pybind", ldflags: str = "") -> str:
    """The same C++ source; another name, or a link flag (another build directory, the same binding)."""
    extra = f", extra_ldflags=[{ldflags!r}]" if ldflags else ""
    return PYBIND.replace(CALL, f'ext = load_inline(name="{name}", cpp_sources=cpp_source, no_implicit_headers=True{extra})')


def evaluated(source: str, cache: Path):  # noqa: ANN201
    result = evaluate(TASK, source, EvalOptions(device="cpu", cache_root=cache, timing=TimingPlan(min_trials=5, budget_s=1.0)))
    assert result.status == "correct", result.messages
    [ext] = result.build.extensions
    units = {u["unit"]: u for u in ext.units}
    return result, ext, units


NINJA = """ninja_required_version = 1.3
cxx = c++
nvcc = /usr/local/cuda/bin/nvcc

cflags = -DTORCH_EXTENSION_NAME=myext -isystem /usr/include/python3 -fPIC
post_cflags =
cuda_cflags = -DTORCH_EXTENSION_NAME=myext -isystem /usr/local/cuda/include
cuda_post_cflags = -O3

rule compile
  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
  depfile = $out.d
  deps = gcc

rule cuda_compile
  depfile = $out.d
  deps = gcc
  command = $nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out $cuda_post_cflags

rule link
  command = $cxx $in $ldflags -o $out

build main.o: compile {build}/main.cpp
build cuda.cuda.o: cuda_compile {build}/cuda.cu

build myext.so: link main.o cuda.cuda.o

default myext.so
"""


def _edges(
    folder: Path, cuda_text: str = "__global__ void k() {}\n", name: str = "myext"
) -> tuple[ObjectCache, list[Edge]]:
    """torch's build file for an extension ``name`` in ``folder/build``, its edges keyed."""
    build = folder / "build"
    build.mkdir(parents=True, exist_ok=True)
    (build / "main.cpp").write_text("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}\n")  # a binding names its module
    (build / "cuda.cu").write_text(cuda_text)
    parsed = parse_ninja(NINJA.replace("myext", name).format(build=build))
    assert parsed is not None
    variables, rules, edges = parsed
    cache = ObjectCache(folder / "cache", trusted=[Path("/usr")])
    for edge in edges:
        edge.command = expand(rules[edge.rule], {**variables, "in": edge.source, "out": edge.output})
        edge.key, edge.why_not = cache.key(edge, build)
    return cache, edges


def cuda_key(folder: Path, **kwargs: str) -> str:
    return _edges(folder, **kwargs)[1][1].key


def test_the_build_file_is_read_as_ninja_runs_it(tmp_path: Path) -> None:
    _, (cpp, cu) = _edges(tmp_path)
    assert (cpp.rule, cpp.output, cu.rule, cu.output) == ("compile", "main.o", "cuda_compile", "cuda.cuda.o")
    assert cpp.command.startswith("c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=myext")
    assert cu.command.endswith(f"-c {tmp_path}/build/cuda.cu -o cuda.cuda.o -O3")
    assert expand("a $$x ${y} $z", {"y": "Y", "z": "Z"}) == "a $x Y Z"
    assert parse_ninja("build a.o: compile x.cpp y.cpp\nrule compile\n  command = c\n") is None  # not torch's shape


def test_the_key_follows_what_decides_the_object_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, (cpp, cu) = _edges(tmp_path / "a")
    assert cpp.key and cu.key and not cpp.why_not and cpp.key != cu.key
    # another build directory and another extension name: the same torch-free CUDA unit
    assert cuda_key(tmp_path / "b", name="other") == cu.key
    # ... but not the binding, nor a source that reads the name
    assert _edges(tmp_path / "c", name="other")[1][0].key != cpp.key
    named = "const char* n = TORCH_EXTENSION_NAME;\n"
    assert cuda_key(tmp_path / "d", cuda_text=named) != cuda_key(tmp_path / "e", cuda_text=named, name="other")
    # the source's bytes and the compilers' environment change it
    assert cuda_key(tmp_path / "f", cuda_text="__global__ void k() { int x = 2; }\n") != cu.key
    monkeypatch.setenv("CPATH", "/somewhere")
    assert cuda_key(tmp_path / "g") != cu.key


def test_a_unit_that_names_a_folder_of_its_own_is_not_cached(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path / "cache", trusted=[Path("/usr")])
    edge = Edge(line="", rule="compile", output="main.o", source=str(tmp_path / "main.cpp"))
    Path(edge.source).write_text("int f();\n")
    for flags in ("-I/home/me/headers", "-isystem ../up", "-I relative/dir", "-include /tmp/x.h"):
        edge.command = f"c++ {flags} -c {edge.source} -o main.o"
        key, why = cache.key(edge, tmp_path)
        assert key == "" and "include folder" in why, flags
    edge.command = f"c++ -I{tmp_path}/inside -isystem /usr/include -c {edge.source} -o main.o"
    assert cache.key(edge, tmp_path)[0]  # the build directory's own headers are checked by content


@pytest.mark.slow
def test_an_unchanged_binding_is_not_compiled_again_in_a_new_build_directory(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, ext1, units1 = evaluated(variant(), cache)
    assert units1["main.o"]["reused"] is False and units1["main.o"]["seconds"] > 0
    # the same binding, another build directory (a link flag differs, as a CUDA-side edit differs)
    _, ext2, units2 = evaluated(variant(ldflags="-Wl,-O1"), cache)
    assert ext2.build_dir != ext1.build_dir
    assert units2["main.o"]["reused"] is True and units2["main.o"]["seconds"] is None
    assert units2["link"]["seconds"] is not None  # only the link ran
    # built again as it is: a cache hit of the build directory, nothing linked again
    again, ext3, _ = evaluated(variant(ldflags="-Wl,-O1"), cache)
    assert ext3.cached is True
    # another extension name: the binding defines the module by that name, so it is compiled
    _, _, units4 = evaluated(variant(name="cf_relu_pybind_renamed"), cache)
    assert units4["main.o"]["reused"] is False


@pytest.mark.slow
def test_a_stored_object_that_breaks_the_link_is_compiled_again_not_blamed_on_the_kernel(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    evaluated(variant(), cache)
    [stored] = list((cache / "objects").glob("*/*/object.o"))
    stored.write_bytes(b"not an object file")  # a damaged cache entry (or one a candidate wrote)
    _, _, units = evaluated(variant(ldflags="-Wl,-O1"), cache)
    assert units["main.o"]["reused"] is False and units["main.o"]["not_cached"] == "given up"
    assert stored.read_bytes() != b"not an object file"  # the entry was made again from the fresh compile
