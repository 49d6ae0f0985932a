"""The task's lower bounds (engine.eval.floor): bytes in and out, parameters, the reference's FLOPs on meta."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from engine.eval.floor import distinct_bytes, measure, total_bytes


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


class Relu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def run(model: nn.Module, *inputs: object) -> dict:
    with torch.no_grad():
        return measure(model, list(inputs), model(*inputs))


def test_a_matmul_counts_two_m_n_k_flops_and_its_bytes() -> None:
    m, k, n = 64, 96, 40
    a, b = torch.rand(m, k), torch.rand(k, n)
    floor = run(MatMul(), a, b)
    assert floor["flops"] == 2 * m * n * k
    assert floor["input_bytes"] == 4 * (m * k + k * n)
    assert floor["output_bytes"] == 4 * m * n
    assert floor["param_bytes"] == 0
    assert floor["dtype"] == "float32" and floor["dtypes"] == ["float32"]
    assert floor["note"] == ""
    assert 0 <= floor["seconds"] < 5


def test_an_elementwise_task_moves_its_input_and_output_and_counts_no_flops() -> None:
    x = torch.randn(32, 1000, dtype=torch.float16)
    floor = run(Relu(), x)
    assert floor["input_bytes"] == floor["output_bytes"] == 2 * 32 * 1000
    assert floor["flops"] == 0
    assert floor["dtype"] == "float16"


def test_parameters_and_buffers_are_recorded_apart_and_a_linear_counts_its_gemm() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(128, 64)
            self.register_buffer("scale", torch.ones(64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * self.scale

    model = Net()
    floor = run(model, torch.randn(16, 128))
    assert floor["param_bytes"] == 4 * (128 * 64 + 64 + 64)
    assert floor["input_bytes"] == 4 * 16 * 128 and floor["output_bytes"] == 4 * 16 * 64
    assert floor["flops"] == 2 * 16 * 128 * 64
    # the meta run used meta copies: the real weights are untouched and still real
    assert model.fc.weight.device.type == "cpu" and model.scale.device.type == "cpu"


def test_nested_inputs_and_outputs_are_all_counted_and_shared_storage_once() -> None:
    class Pair(nn.Module):
        def forward(self, xs: list[torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
            return xs[0] + y, [xs[1] * 2]

    x0, x1, y = torch.randn(10, 10), torch.randn(5), torch.randn(10, 10)
    floor = run(Pair(), [x0, x1], y)
    assert floor["input_bytes"] == 4 * (100 + 5 + 100)
    assert floor["output_bytes"] == 4 * (100 + 5)
    # the same tensor passed twice is read once
    assert total_bytes([y, y, y[:5]]) == 4 * 100


def test_a_broadcast_view_counts_the_memory_it_covers_not_its_elements() -> None:
    row = torch.randn(1, 256)
    wide = row.expand(1024, 256)
    assert distinct_bytes(wide) == 4 * 256
    assert distinct_bytes(torch.empty(0, 7)) == 0


def test_a_reference_the_meta_device_cannot_run_records_no_flops_and_says_why() -> None:
    class ReadsBack(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * float(x.sum().item())  # a value read back: no meta kernel can give it

    x = torch.randn(8, 8)
    floor = run(ReadsBack(), x)
    assert floor["flops"] is None
    assert "meta device" in floor["note"]
    assert floor["input_bytes"] == floor["output_bytes"] == 4 * 64  # the bytes are still measured


def test_measuring_never_raises() -> None:
    floor = measure(object(), [torch.randn(3)], None)  # not a module at all
    assert floor["flops"] is None and floor["note"]


def test_a_conv_task_counts_the_convolutions_flops() -> None:
    conv = nn.Conv2d(3, 8, kernel_size=3, bias=False)
    x = torch.randn(2, 3, 16, 16)
    floor = run(conv, x)
    out_h = out_w = 14
    assert floor["flops"] == 2 * 2 * 8 * out_h * out_w * 3 * 3 * 3
    assert floor["param_bytes"] == 4 * 8 * 3 * 3 * 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_dominant_dtype_is_the_one_holding_most_bytes(dtype: torch.dtype) -> None:
    class Mixed(nn.Module):
        def forward(self, big: torch.Tensor, small: torch.Tensor) -> torch.Tensor:
            return big * small.to(big.dtype).sum()

    floor = run(Mixed(), torch.randn(1000).to(dtype), torch.randn(10))
    assert floor["dtype"] == str(dtype).removeprefix("torch.")
    assert floor["dtypes"] == sorted({"float32", floor["dtype"]})
