"""cudaforge's precompiled torch header: made once per flag set, then used by new builds, on CPU."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch.utils.cpp_extension

from engine.eval.build.pch import FORMAT_MARKER, MAX_HEADER_SETS, HeaderStore, first_include, header_key
from engine.eval.evaluate import evaluate
from engine.eval.options import EvalOptions
from tests.conftest import EXAMPLES, with_run_headers
from tests.make_headers import shared_cache

TASK = (EXAMPLES / "tasks" / "relu.py").read_text()
# The example kernel without its -O3: the flag-less set (the one most LLM kernels share: an empty flag
# adds no word) and no optimiser run over torch's inline code, so both builds measure the parse of
# torch's headers that the precompiled header replaces (-O3 adds 5-10 s of code generation to each here).
KERNEL = (EXAMPLES / "kernels" / "relu_cpu.py").read_text().replace('    extra_cflags=["-O3"],\n', "")
assert "extra_cflags" not in KERNEL


def test_first_include_sees_the_binding_header() -> None:
    assert (
        first_include("// c\n#include <torch/extension.h>\n#include <vector>", implicit_headers=False)
        == "torch/extension.h"
    )
    assert (
        first_include("#include <vector>\n#include <torch/extension.h>", implicit_headers=False) == "vector"
    )
    assert first_include("int x;", implicit_headers=True) == "torch/extension.h"


@pytest.mark.slow
def test_header_is_made_once_then_used_by_a_new_build_and_keeps_old_builds_cached(
    tmp_path: Path, ext_cache: Path
) -> None:
    """The flag-less set's header, made by cudaforge's own maker after a first build asked for it.

    CI makes exactly this header in the shared test cache before the tests (``python -m
    tests.make_headers`` evaluates this kernel there with ``make_pch``: the first build queues it, the
    maker makes it), so the test checks that one rather than making a second (about two minutes of a
    core). Where none was made (the tests run without that step) it is made here, as a user's first
    build makes it."""
    key = header_key({}, False)  # no CUDA sources, no flags
    made_before = HeaderStore(ext_cache).ready(key)
    root = ext_cache if made_before else tmp_path
    options = EvalOptions(device="cpu", cache_root=root, do_timing=False, use_pch=True, make_pch=True)  # the tests make none by default
    first = evaluate(TASK, KERNEL, options)  # built before the header existed (here, or by make_headers)
    assert first.status == "correct"
    if not made_before:
        assert first.build.extensions[0].pch == "queued"
        deadline = time.monotonic() + 600
        while not HeaderStore(root).ready(key) and time.monotonic() < deadline:
            time.sleep(1)
    assert HeaderStore(root).ready(key), list((root / "pch").glob("*/make.log"))
    assert (root / "pch" / key / FORMAT_MARKER).is_file()

    fresh = f"cf_relu_cpu_pch_{uuid.uuid4().hex[:12]}"  # a build no earlier run left cached
    second = evaluate(TASK, KERNEL.replace('name="cf_relu_cpu"', f'name="{fresh}"'), options)
    ext = second.build.extensions[0]
    assert second.status == "correct" and ext.pch == "used" and not ext.cached  # used, not made again
    assert "-Winvalid-pch" in second.build.log and "not used because" not in second.build.log
    assert (root / "pch" / key / "used").exists()
    if not made_before:
        print(f"cold build without the header {first.build.seconds:.1f} s, with it {second.build.seconds:.1f} s")

    again = evaluate(TASK, KERNEL, options)  # built before the header existed: still a cache hit
    assert again.build.cached is True and again.build.extensions[0].pch == ""


def test_an_empty_flag_shares_the_flag_less_header() -> None:
    """Most LLM kernels pass ``extra_cflags=['']``: the same compile command, so the same header set."""
    plain = header_key({}, True)
    assert header_key({"extra_cflags": [""]}, True) == plain == header_key({"extra_cflags": ["  "]}, True)
    assert header_key({"extra_cflags": None}, True) == plain
    assert header_key({"extra_include_paths": [""]}, True) != plain  # torch makes that -I<cwd>: its own set
    assert header_key({"extra_cflags": ["-O3"]}, True) != plain
    assert header_key({"extra_cflags": "-O3"}, True) == header_key({"extra_cflags": ["-O3"]}, True)
    assert header_key({}, False) != plain


def test_a_header_whose_torch_is_gone_is_neither_used_nor_kept(tmp_path: Path) -> None:
    """A recreated virtualenv left a header whose stub includes the deleted venv's torch by absolute
    path: every build using it failed to compile, blamed on the kernel (seen on this machine)."""
    store = HeaderStore(tmp_path)
    live, dead = header_key({}, True), "0" * 16
    for key, target in ((live, Path(torch.utils.cpp_extension.include_paths()[0]) / "torch" / "extension.h"),
                        (dead, tmp_path / "gone-venv" / "torch" / "extension.h")):
        _made(store, key, target)
    assert store.ready(live) and not store.ready(dead)
    assert store.prune_dead() == [dead]
    assert not store.folder(dead).exists() and store.ready(live)


def test_the_header_key_names_the_torch_install_it_was_made_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two virtualenvs with the same torch version have different headers (absolute include paths)."""
    key = header_key({}, True)
    monkeypatch.setattr(torch.utils.cpp_extension, "include_paths", lambda *a, **k: ["/elsewhere/torch/include"])
    assert header_key({}, True) != key


def _made(store: HeaderStore, key: str, target: Path, marker: bool = True) -> Path:
    """A set as a finished maker leaves it (``marker``: made by this cudaforge's keys)."""
    folder = store.folder(key)
    (folder / "torch").mkdir(parents=True)
    (folder / "torch" / "extension.h").write_text(f'#include "{target}"\n')
    (folder / "torch" / "extension.h.gch").write_bytes(b"gch")
    if marker:
        (folder / FORMAT_MARKER).touch()
    return folder


def test_sets_an_older_cudaforge_made_are_pruned_and_a_full_store_gives_up_its_least_used_set(
    tmp_path: Path,
) -> None:
    """Three sets from before the key named the torch install filled the store for good: no new header
    was ever made and every build was cold (seen in this repository's own test cache)."""
    import os

    real = Path(torch.utils.cpp_extension.include_paths()[0]) / "torch" / "extension.h"
    store = HeaderStore(tmp_path)
    old = [_made(store, f"old{i}", real, marker=False) for i in range(3)]
    assert sorted(store.prune_dead()) == ["old0", "old1", "old2"] and not any(p.exists() for p in old)

    stale, busy, fresh = (_made(store, name, real) for name in ("stale", "busy", "fresh"))
    hours_ago = time.time() - 7200
    for folder in (stale, busy):
        os.utime(folder / "torch" / "extension.h.gch", (hours_ago, hours_ago))
    store.mark_used("busy")  # a build compiled against it just now
    assert store.evict_unused(MAX_HEADER_SETS - 1) == ["stale"]
    assert busy.exists() and fresh.exists() and not stale.exists()
    assert store.evict_unused(1) == []  # the other two were used within the hour: kept


def _fake_header_set(root: Path, stub_tail: str, leads_to: Path | None = None) -> HeaderStore:
    """A ready header set for the flag-less CPU key whose precompiled file is not valid, so g++ (told
    ``-Winvalid-pch``) reads its stub instead: the header the stub includes (torch's own unless
    ``leads_to``) and its tail decide what the build then meets."""
    import torch.utils.cpp_extension as cpp_extension

    store = HeaderStore(root)
    torch_dir = store.folder(header_key({}, False)) / "torch"
    torch_dir.mkdir(parents=True)
    (store.folder(header_key({}, False)) / FORMAT_MARKER).touch()
    real = Path(cpp_extension.include_paths()[0]) / "torch" / "extension.h"
    (torch_dir / "extension.h").write_text(f'#include "{leads_to or real}"\n{stub_tail}')
    (torch_dir / "extension.h.gch").write_bytes(b"not a precompiled header")
    assert store.ready(header_key({}, False))
    return store


def _working_header_set(root: Path) -> HeaderStore:
    """A ready header set for the flag-less CPU key that works: the run's own (``python -m tests.make_headers``
    makes it before the tests, as CI does), linked into ``root``'s store (tests/conftest.py's
    ``with_run_headers``) so that a test that sets it aside takes it from no other test; a build with it
    skips torch's headers (about 25 s each on a 2-core machine). Where the run has none, the stub that reads
    torch's headers itself (the same outcome, slower)."""
    key = header_key({}, False)
    if not HeaderStore(shared_cache()).ready(key):
        return _fake_header_set(root, "")
    store = HeaderStore(with_run_headers(root))
    assert store.ready(key)
    return store


def _evaluate_beside(store: HeaderStore, tag: str, edit: tuple[str, str] | None = None) -> Any:
    """The kernel under a build name of its own (``tag``), ``edit`` applied once, evaluated with ``store``'s
    header set and no header made."""
    source = KERNEL.replace('name="cf_relu_cpu"', f'name="cf_relu_cpu_{tag}_{uuid.uuid4().hex[:8]}"')
    if edit is not None:
        assert edit[0] in source
        source = source.replace(*edit, 1)
    options = EvalOptions(device="cpu", cache_root=store.root.parent, do_timing=False, use_pch=True, make_pch=False)
    return evaluate(TASK, source, options)


@pytest.mark.slow
def test_a_build_the_header_breaks_is_built_again_without_it_and_the_header_set_aside(tmp_path: Path) -> None:
    """The harness's faults are never the kernel's: a header set that makes a build fail with no error in
    the candidate's code (here its stub includes a file that is not there, which stops g++ before torch's
    headers) is put aside, and the kernel is built once more without it, correct: once, under its own
    name, so the import after the prebuild thread's build finds it done (torch names a build whose flags
    changed ``name_v1``; the import then compiled it all over again)."""
    broken = tmp_path / "broken.h"
    broken.write_text('#include "cudaforge_no_such_header.h"\n')
    store = _fake_header_set(tmp_path, "", leads_to=broken)
    result = _evaluate_beside(store, "broken_pch")
    assert result.status == "correct", result.messages
    assert [e.pch for e in result.build.extensions] == [""]  # the build that counts: without the header
    built = Path(result.build.extensions[0].build_dir)
    assert [p.name for p in built.glob("*.so")] == [f"{result.build.extensions[0].name}.so"]  # no name_v1.so
    assert any("precompiled header failed outside the candidate's code" in m for m in result.messages), result.messages
    key = header_key({}, False)
    assert not store.ready(key) and (store.folder(key) / "failed.log").is_file()  # put aside, to be made anew


@pytest.mark.slow
def test_a_candidates_own_error_with_the_header_is_its_own_after_one_build(tmp_path: Path) -> None:
    """An error in the candidate's own code is its own, header or not, even with errors in torch's headers
    after it: one build, and the header kept."""
    store = _working_header_set(tmp_path)
    result = _evaluate_beside(store, "own_error", ("torch::Tensor relu(", "torch::Tensor relu(undeclared_type_7 y, "))
    assert result.status == "compile_error" and "undeclared_type_7" in result.messages[0], result.messages
    assert "FunctionTraits.h" in result.build.log  # the cascade into torch's headers is there too
    assert [e.pch for e in result.build.extensions] == ["used"]
    assert store.ready(header_key({}, False))


@pytest.mark.slow
def test_a_build_that_fails_without_the_header_too_keeps_the_header(tmp_path: Path) -> None:
    """A binding that names a function the candidate never declared fails in torch's generated code, not
    in the candidate's lines: the header is suspected, and the build without it fails the same way, so the
    error is the build's own and the header stays for every other build."""
    store = _working_header_set(tmp_path)
    result = _evaluate_beside(store, "undeclared", ('functions=["relu"', 'functions=["relu", "never_declared_fn"'))
    assert result.status == "compile_error" and any("never_declared_fn" in m for m in result.messages), result.messages
    assert [e.pch for e in result.build.extensions] == [""]  # the build without the header, which failed too
    assert not any("set aside" in m for m in result.messages)
    assert store.ready(header_key({}, False))
