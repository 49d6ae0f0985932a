"""Constructor arguments written back as source: every value is rebuilt by exactly what is written."""

from __future__ import annotations

import enum
import functools

import pytest
import torch
import torch.nn as nn

from engine.model.literals import LOCAL, NotLiteral, source


class Mode(enum.Enum):
    FAST = 1


def rebuild(value: object) -> object:
    text, imports = source(value)
    namespace: dict = {}
    exec("\n".join(sorted(imports)), namespace)
    return eval(text, namespace)


@pytest.mark.parametrize(
    "value",
    [None, True, 3, -2.5, float("inf"), "relu", b"x", (1,), [1, (2, 3)], {"a": [1, 2]}, {1, 2}, torch.bfloat16,
     torch.device("cpu"), torch.Size([2, 3]), nn.BatchNorm2d, nn.functional.gelu, Mode.FAST],
)  # fmt: skip
def test_values_rebuild_from_their_source(value: object) -> None:
    rebuilt = rebuild(value)
    assert rebuilt == (tuple(value) if isinstance(value, torch.Size) else value)


def test_small_tensors_and_partials_rebuild() -> None:
    tensor = torch.tensor([[1.5, 2.0]], dtype=torch.float64)
    assert torch.equal(rebuild(tensor), tensor) and rebuild(tensor).dtype == torch.float64
    partial = rebuild(functools.partial(nn.functional.leaky_relu, negative_slope=0.2))
    assert partial.func is nn.functional.leaky_relu and partial.keywords == {"negative_slope": 0.2}


def test_what_cannot_be_written_says_what_it_is() -> None:
    with pytest.raises(NotLiteral, match="a module \\(Linear\\) built outside"):
        source(nn.Linear(2, 2))
    with pytest.raises(NotLiteral, match="too large"):
        source(torch.zeros(100))
    with pytest.raises(NotLiteral, match="defined inside a function"):
        source(lambda x: x)

    class Local:
        pass

    with pytest.raises(NotLiteral, match="defined inside a function"):
        source(Local)
    with pytest.raises(NotLiteral, match="object"):
        source(object())


def test_names_of_the_models_own_file_ask_for_it_to_be_inlined() -> None:
    text, imports = source(Mode, local_module=__name__)
    assert (text, imports) == ("Mode", {LOCAL})


def test_a_config_keeps_the_private_state_that_decides_its_behaviour() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, vocab_size=16)
    config._attn_implementation = "sdpa"
    text, imports = source(config)
    assert "'attn_implementation': 'sdpa'" in text
    rebuilt = rebuild(config)
    assert rebuilt.to_dict() == config.to_dict() and rebuilt._attn_implementation == "sdpa"
