"""The ablation's decisions on CPU (engine/eval/ablation.py; ARCHITECTURE.md §3, "Defences").

The ablated forward needs a GPU (tests/test_defences_gpu.py), but which extensions get a switch and
that ``Ablated`` always switches them back do not: these tests build real shared libraries with the
system C++ compiler, the split ones from the very switch text the split build generates
(``ABLATE_STATE``), plus a reader of its state, and load them through ``ctypes`` as the worker does.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import types

import pytest

from engine.eval import ablation
from engine.eval.build.split.launchers import ABLATE_STATE

READER = 'extern "C" int cf_test_ablated() { return cf_ablated; }\n'
NO_SWITCH = 'extern "C" int cf_test_plain() { return 0; }\n'  # a stock, fast or C++ build: no switch


@pytest.fixture(scope="module")
def extensions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, types.ModuleType]:
    """Two split-built extensions and one without a switch, as modules whose ``__file__`` is the library."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    folder = tmp_path_factory.mktemp("ablation")
    made = {}
    for name, source in (("split_a", ABLATE_STATE + READER), ("split_b", ABLATE_STATE + READER), ("plain", NO_SWITCH)):
        (folder / f"{name}.cpp").write_text(source)
        library = folder / f"{name}.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(folder / f"{name}.cpp")], check=True)
        module = types.ModuleType(f"cf_{name}")
        module.__file__ = str(library)
        made[name] = module
    return made


def _states(modules: list[types.ModuleType]) -> list[int]:
    return [ctypes.CDLL(m.__file__).cf_test_ablated() for m in modules]


def test_only_split_built_cuda_extensions_get_switches_and_any_other_cuda_build_means_none(
    extensions: dict[str, types.ModuleType],
) -> None:
    a, b, plain = extensions["split_a"], extensions["split_b"], extensions["plain"]
    assert len(ablation.switches([a, b], ["split", "split"]) or []) == 2
    assert len(ablation.switches([a, plain], ["split", "cpp"]) or []) == 1  # host code launches nothing
    for other in ("stock", "fast"):  # its kernels would run whatever the switch says: the share rule judges
        assert ablation.switches([a, plain], ["split", other]) is None, other
    assert ablation.switches([plain], ["cpp"]) is None  # no CUDA extension: nothing to ablate
    assert ablation.switches([], []) is None


def test_the_switches_are_on_inside_ablated_and_off_after_even_when_it_raises(
    extensions: dict[str, types.ModuleType],
) -> None:
    split = [extensions["split_a"], extensions["split_b"]]
    setters = ablation.switches(split, ["split", "split"])
    assert setters is not None and _states(split) == [0, 0]
    with ablation.Ablated(setters):
        assert _states(split) == [1, 1]
    assert _states(split) == [0, 0]
    with pytest.raises(RuntimeError), ablation.Ablated(setters):
        assert _states(split) == [1, 1]
        raise RuntimeError("the forward failed without its kernels")
    assert _states(split) == [0, 0]  # the timing and shapes after it launch the kernels again


class _Worker:
    """What the ablation stage uses of the worker (engine.eval.worker.Evaluation), on CPU: the real
    stage needs CUDA only for the candidate's launches, which here are a C switch a Python kernel reads."""

    def __init__(self, switches: list, suspect: list | None) -> None:
        from engine.eval.result import EvalResult

        self._ablation_switches = switches
        self.result = EvalResult(status="correct", settings={"replay": {"fresh_median_ms": 0.7, "seen_median_ms": 0.3}})
        self.job = types.SimpleNamespace(tolerances={}, seed=0, relax_runtime=(), refuse_runtime=(), guards=True)
        self.device = types.SimpleNamespace(type="cpu")
        if suspect is not None:
            self.replay_suspect = suspect
        self.rules: list[str] = []

    def stage(self, name: str) -> None: ...
    def sync(self) -> None: ...
    def poison(self) -> None: ...

    def make_inputs(self, task, seed: int) -> list:  # noqa: ANN001
        import torch

        return [torch.randn(64, generator=torch.Generator().manual_seed(seed))]

    def guard(self, rule: str, message: str) -> bool:
        self.rules.append(rule)
        self.result.messages.append(f"refused by the runtime guard [{rule}]: {message}")
        return True


def _kernel(library: types.ModuleType, memo: bool, capacity: int | None = None):  # noqa: ANN202
    """x * 2 by an 'own kernel' that does nothing while the switch is on; ``memo``: a value-keyed cache,
    of ``capacity`` answers where given (the oldest pushed out)."""
    import torch

    state = ctypes.CDLL(library.__file__).cf_test_ablated
    kept: dict[bytes, object] = {}

    def forward(x):  # noqa: ANN001, ANN202
        key = x.numpy().tobytes()
        if memo and key in kept:
            return kept[key].clone()
        out = torch.full_like(x, float("nan"))
        if not state():
            out = x * 2
        kept[key] = out
        if capacity is not None and len(kept) > capacity:
            del kept[next(iter(kept))]
        return out

    return forward


@pytest.mark.parametrize("memo", [False, True], ids=["honest", "memo"])
def test_a_suspect_the_replay_probe_deferred_is_called_on_the_tensors_it_saw_and_named_a_replay(
    extensions: dict[str, types.ModuleType], memo: bool
) -> None:
    from engine.eval import late

    switches = ablation.switches([extensions["split_a"]], ["split"])
    new = _kernel(extensions["split_a"], memo)
    seen = [__import__("torch").randn(64)]
    new(*seen)  # a timed call on a timing set: a memo keeps its answer
    worker = _Worker(switches, suspect=seen)
    refused = late.own_kernels_unneeded(worker, None, lambda x: x * 2, new)
    assert refused is memo and worker.rules == (["output-replayed"] if memo else [])
    ablated = worker.result.kernel_share["ablation"]
    assert ablated["outcome"] == ("replayed" if memo else "needed")
    assert ablated["seen"]["outcome"] == ("passes" if memo else "fails")
    assert not memo or "it answered new inputs wrong but still returned the answer for inputs it had seen" in worker.result.messages[-1]

    fresh_memo = _kernel(extensions["split_a"], memo=True)
    fresh_memo(*seen)  # not suspected: new tensors of the stage's own seed, the rule is the ablation's own
    worker = _Worker(switches, suspect=None)
    assert late.own_kernels_unneeded(worker, None, lambda x: x * 2, fresh_memo) is False and worker.rules == []
    assert "seen" not in worker.result.kernel_share["ablation"]


def test_a_suspect_whose_work_is_all_in_pytorch_is_named_for_that_not_for_a_replay(
    extensions: dict[str, types.ModuleType],
) -> None:
    """On the H100 a kernel that launches a no-op beside cuDNN's convolution was a replay suspect; with
    its kernels off it answers any input right, so the ablation on new inputs names it first."""
    from engine.eval import late

    switches = ablation.switches([extensions["split_a"]], ["split"])
    seen = [__import__("torch").randn(64)]
    worker = _Worker(switches, suspect=seen)
    assert late.own_kernels_unneeded(worker, None, lambda x: x * 2, lambda x: x * 2) is True
    assert worker.rules == ["own-kernel-unneeded"]
    ablated = worker.result.kernel_share["ablation"]
    assert (ablated["outcome"], ablated["seen"]["outcome"]) == ("unneeded", "passes")


def test_a_memo_of_one_answer_is_asked_on_the_suspect_tensors_before_a_new_input_can_push_them_out(
    extensions: dict[str, types.ModuleType],
) -> None:
    """A review of session 22: asked on new inputs first, a memo that keeps only its last answer had let the
    suspect's go by the time the seen forward ran."""
    from engine.eval import late

    switches = ablation.switches([extensions["split_a"]], ["split"])
    new = _kernel(extensions["split_a"], memo=True, capacity=1)
    seen = [__import__("torch").randn(64)]
    new(*seen)
    worker = _Worker(switches, suspect=seen)
    assert late.own_kernels_unneeded(worker, None, lambda x: x * 2, new) is True
    assert worker.rules == ["output-replayed"]
