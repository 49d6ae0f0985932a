"""What names a model is checked before anything loads: one clear line for each kind of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.model.spec import InputShape, ModelError, build_spec, parse_dtype
from tests.conftest import EXAMPLES

MODEL = EXAMPLES / "models" / "tiny_mlp.py"
TASK = EXAMPLES / "tasks" / "relu.py"


def test_the_three_ways_to_name_a_model() -> None:
    kernelbench = build_spec(str(TASK))
    assert (kernelbench.kind, kernelbench.file) == ("kernelbench", str(TASK.resolve()))
    factory = build_spec(f"{MODEL}:make_model", inputs=f"{MODEL}:example_inputs", dtype="bf16")
    assert (factory.kind, factory.factory, factory.inputs_function, factory.torch_dtype) == (
        "file", "make_model", "example_inputs", "bfloat16",
    )  # fmt: skip
    imported = build_spec("torchvision.models:resnet50", input_shapes=["64,3,224,224"], dtype="float16")
    assert (imported.kind, imported.module, imported.factory, imported.dtype) == ("import", "torchvision.models", "resnet50", "fp16")
    assert imported.input_shapes == (InputShape((64, 3, 224, 224), "float32"),)
    assert build_spec(f"{MODEL}:make_model", input_shapes=["8,1024:int64"]).input_shapes[0].dtype == "int64"


def test_a_missing_factory_lists_the_files_own_functions_before_what_it_imports(tmp_path: Path) -> None:
    model = tmp_path / "llms.py"
    imports = ", ".join(f"Imported{i}" for i in range(14))
    model.write_text(f"from collections import {imports}\n\n\ndef gpt2():\n    pass\n\n\ndef ids():\n    pass\n")
    with pytest.raises(ModelError) as raised:
        build_spec(f"{model}:gpt", inputs=f"{model}:ids")
    assert "defines no factory `gpt` (it defines: gpt2, ids, Imported0, Imported1," in str(raised.value)
    assert str(raised.value).endswith(", … (16))")


@pytest.mark.parametrize(
    ("target", "kwargs", "says"),
    [
        (f"{MODEL}:build", {"inputs": f"{MODEL}:example_inputs"}, "defines no factory `build` (it defines: Block, TinyNet, example_inputs, make_model"),
        (f"{MODEL}:make_model", {"inputs": f"{MODEL}:batch"}, "defines no inputs function `batch`"),
        (f"{MODEL}:make_model", {}, "needs example inputs"),
        (f"{MODEL}:make_model", {"inputs": f"{MODEL}:example_inputs", "input_shapes": ["4,32"]}, "not both"),
        (str(MODEL), {}, "is not a KernelBench file (no Model, get_inputs, get_init_inputs)"),
        ("nowhere.py:make", {"input_shapes": ["4"]}, "no such model file: nowhere.py"),
        (f"{MODEL}:make_model", {"inputs": "inputs.py"}, "is not FILE.py:function"),
        ("torchvision.models", {"input_shapes": ["4"]}, "names no model"),
        (f"{MODEL}:make_model", {"input_shapes": ["4,x"]}, "expected positive sizes"),
        (f"{MODEL}:make_model", {"input_shapes": ["4:complex7"]}, "unknown dtype 'complex7'"),
        (f"{MODEL}:make_model", {"input_shapes": ["4"], "dtype": "int8"}, "--dtype 'int8' is not one of fp32, bf16, fp16"),
        (str(TASK), {"input_shapes": ["4"]}, "brings its own inputs"),
    ],
)
def test_bad_input_is_one_line_naming_what_is_wrong(target: str, kwargs: dict, says: str) -> None:
    with pytest.raises(ModelError) as caught:
        build_spec(target, **kwargs)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_model_file_with_a_syntax_error_is_named_with_its_line(tmp_path: Path) -> None:
    broken = tmp_path / "model.py"
    broken.write_text("def make_model(:\n    pass\n")
    with pytest.raises(ModelError, match=r"model.py has a syntax error at line 1"):
        build_spec(f"{broken}:make_model", input_shapes=["4"])


def test_dtype_names() -> None:
    assert [parse_dtype(t) for t in (None, "fp32", "BF16", "float16", "bfloat16")] == ["fp32", "fp32", "bf16", "fp16", "bf16"]
