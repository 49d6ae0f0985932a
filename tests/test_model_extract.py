"""Extraction: identical modules become one task, every task is proven to stand alone, and a module that
cannot is listed with its reason (the model process through engine.model.client, on CPU)."""

from __future__ import annotations

import pytest
import torch

from engine.model.client import run_job
from engine.model.groups import Group, select
from engine.model.spec import build_spec
from engine.model.taskgen import read_fingerprint
from engine.model.trace import ModuleRecord
from engine.tasks import import_module_from_source
from tests.conftest import EXAMPLES, REPO

TINY = EXAMPLES / "models" / "tiny_mlp.py"
FIXTURES = REPO / "tests" / "fixtures" / "model"


def extract(target: str, inputs: str, **job: object) -> dict:
    return run_job("extract", build_spec(target, inputs=inputs, device="cpu"), **job)


def test_identical_blocks_give_one_task_that_rebuilds_each_block_exactly() -> None:
    result = extract(f"{TINY}:make_model", f"{TINY}:example_inputs", paths=["blocks.1"])
    [block] = result["tasks"]
    assert block["paths"] == ["blocks.0", "blocks.1"] and block["name"] == "block"
    assert block["weights"] == {"blocks.0": {"prefix": "blocks.0.", "tensors": 4}, "blocks.1": {"prefix": "blocks.1.", "tensors": 4}}
    stamp, intact = read_fingerprint(block["source"])
    assert stamp == block["fingerprint"] and intact
    assert not read_fingerprint(block["source"].replace("torch.randn", "torch.rand"))[1]
    # the task, built from its own get_init_inputs() and given a model's block weights, is that block
    task = import_module_from_source(block["source"], "block.py")
    model = import_module_from_source(TINY.read_text(), str(TINY)).make_model().eval()
    alone = task.Model(*task.get_init_inputs())
    alone.load_state_dict(model.blocks[1].state_dict())
    x = task.get_inputs()[0]
    assert x.shape == (256, 64)
    assert torch.equal(alone(x), model.blocks[1](x))
    shares = {m["path"]: m["share"]["total"] for m in result["profile"]["modules"]}
    assert block["share"] == pytest.approx(shares["blocks.0"] + shares["blocks.1"])


def test_modules_that_cannot_stand_alone_are_listed_with_their_reason() -> None:
    model = FIXTURES / "awkward.py"
    result = extract(f"{model}:make_model", f"{model}:example_inputs", paths=["a", "b", "local", "holder"])
    assert [t["paths"] for t in result["tasks"]] == [["a"]]
    assert "must not be carried" not in result["tasks"][0]["source"]  # the file's __main__ block is left out
    reasons = {s["paths"][0]: s["reason"] for s in result["skipped"]}
    # b has a's class, shapes and constructor arguments, but not a's behaviour: another group, and alone
    # (built from its constructor) it misses the scale the model set after construction
    assert "does not reproduce its output in the model" in reasons["b"]
    assert "is defined inside a function" in reasons["local"]
    assert "constructor argument `inner` is a module (Linear) built outside and passed in" in reasons["holder"]


def test_a_path_that_is_no_module_is_a_clear_error() -> None:
    from engine.model.spec import ModelError

    with pytest.raises(ModelError, match="no module to extract at blocks.7"):
        extract(f"{TINY}:make_model", f"{TINY}:example_inputs", paths=["blocks.7"])


def _records(tree: dict[str, list[str]], containers: set[str]) -> dict[str, ModuleRecord]:
    return {
        path: ModuleRecord(path, "T." + path, children, path in containers, 0, 0, calls=0 if path in containers else 1)
        for path, children in tree.items()
    }


def test_selection_takes_the_heaviest_groups_without_overlap_and_passes_over_stacks() -> None:
    tree = {
        "": ["trunk", "head"], "trunk": ["trunk.layers", "trunk.norm"], "trunk.layers": ["trunk.layers.0", "trunk.layers.1"],
        "trunk.layers.0": ["trunk.layers.0.mlp"], "trunk.layers.1": ["trunk.layers.1.mlp"], "trunk.layers.0.mlp": [],
        "trunk.layers.1.mlp": [], "trunk.norm": [], "head": [],
    }  # fmt: skip
    records = _records(tree, {"trunk.layers"})
    times = {"": 10.0, "trunk": 8.0, "trunk.layers.0": 3.5, "trunk.layers.1": 3.5, "trunk.layers.0.mlp": 2.0,
             "trunk.layers.1.mlp": 2.0, "trunk.norm": 1.0, "head": 2.0}  # fmt: skip
    groups = [Group(["trunk"], "Trunk"), Group(["trunk.layers.0", "trunk.layers.1"], "Layer"),
              Group(["trunk.layers.0.mlp", "trunk.layers.1.mlp"], "MLP"), Group(["trunk.norm"], "Norm"), Group(["head"], "Head")]  # fmt: skip
    chosen = select(groups, records, times, top=3)
    # trunk (8 ms) holds a stack of identical layers taking 7 of them: passed over for the layers; the
    # MLPs lie inside the layers taken, so the next are head and norm
    assert [g.type for g in chosen] == ["Layer", "Head", "Norm"]
    assert [g.type for g in select(groups, records, times, top=5, leaves=True)] == ["MLP", "Head", "Norm"]
    groups[1].skipped = "cannot stand alone"
    assert [g.type for g in select(groups, records, times, top=2)] == ["MLP", "Head"]


def test_a_transformers_llama_gives_its_decoder_layer_as_one_task() -> None:
    pytest.importorskip("transformers")
    model = FIXTURES / "llama_tiny.py"
    result = extract(f"{model}:make_model", f"{model}:example_inputs", paths=["model.layers.1"])
    [task] = result["tasks"]
    assert task["paths"] == ["model.layers.0", "model.layers.1"]
    assert "class Model(LlamaDecoderLayer)" in task["source"] and "'attn_implementation': 'sdpa'" in task["source"]
    assert list(task["inputs"]) == ["hidden_states", "position_ids", "position_embeddings"]
    assert task["constants"]["attention_mask"] == "None"


def test_a_llama_that_passes_its_kv_cache_says_how_its_decoder_layers_can_be_extracted() -> None:
    pytest.importorskip("transformers")
    model = FIXTURES / "llama_tiny.py"
    result = extract(f"{model}:make_caching_model", f"{model}:example_inputs", paths=["model.layers.1"])
    assert result["tasks"] == []
    [skipped] = result["skipped"]
    assert skipped["paths"] == ["model.layers.1"]
    assert "Cache (only tensors and constants can be task inputs); it is the model's KV cache: call the model with use_cache=False" in skipped["reason"]
