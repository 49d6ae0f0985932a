"""The task's lower bounds (engine.eval.floor): bytes in and out, parameters, the reference's FLOPs.

The FLOP counter is held equal to torch's own (``torch.utils.flop_counter.FlopCounterMode``) on every
kind of call it knows, on real tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.eval.floor import distinct_bytes, measure, total_bytes

r = torch.randn


class Call(nn.Module):
    """A reference whose forward is one function (KernelBench's level-1 shape)."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def test_a_matmul_counts_two_m_n_k_flops_and_its_bytes() -> None:
    m, k, n = 64, 96, 40
    floor = measure(Call(torch.matmul), [torch.rand(m, k), torch.rand(k, n)])
    assert floor["flops"] == 2 * m * n * k
    assert floor["input_bytes"] == 4 * (m * k + k * n)
    assert floor["output_bytes"] == 4 * m * n
    assert floor["param_bytes"] == 0
    assert floor["dtype"] == "float32" and floor["dtypes"] == ["float32"]
    assert floor["note"] == ""
    assert floor["seconds"] >= 0  # recorded (what it costs is benchmarks/profile_overhead.py's to say)


def test_an_elementwise_task_moves_its_input_and_output_and_counts_no_flops() -> None:
    floor = measure(Call(torch.relu), [torch.randn(32, 1000, dtype=torch.float16)])
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

    floor = measure(Net(), [torch.randn(16, 128)])
    assert floor["param_bytes"] == 4 * (128 * 64 + 64 + 64)
    assert floor["input_bytes"] == 4 * 16 * 128 and floor["output_bytes"] == 4 * 16 * 64
    assert floor["flops"] == 2 * 16 * 128 * 64


def test_nested_inputs_and_outputs_are_all_counted_and_shared_storage_once() -> None:
    class Pair(nn.Module):
        def forward(self, xs: list[torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
            return xs[0] + y, [xs[1] * 2]

    x0, x1, y = torch.randn(10, 10), torch.randn(5), torch.randn(10, 10)
    floor = measure(Pair(), [[x0, x1], y])
    assert floor["input_bytes"] == 4 * (100 + 5 + 100)
    assert floor["output_bytes"] == 4 * (100 + 5)
    # the same tensor passed twice is read once
    assert total_bytes([y, y, y[:5]]) == 4 * 100


def test_a_broadcast_view_counts_the_memory_it_covers_not_its_elements() -> None:
    wide = torch.randn(1, 256).expand(1024, 256)
    assert distinct_bytes(wide) == 4 * 256
    assert distinct_bytes(torch.empty(0, 7)) == 0
    assert distinct_bytes(torch.empty(1024, 256, device="meta")) == 4 * 1024 * 256


def test_a_reference_that_raises_records_what_it_can_and_says_why() -> None:
    def broken(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no")

    floor = measure(Call(broken), [torch.randn(8, 8)])
    assert floor["flops"] is None and floor["output_bytes"] is None
    assert "the reference call failed: ValueError: no" in floor["note"]
    assert floor["input_bytes"] == 4 * 64  # the inputs are still measured


def test_measuring_never_raises() -> None:
    floor = measure(object(), [torch.randn(3)])  # not a module: not even callable
    assert floor["flops"] is None and floor["note"]


def test_in_place_and_vector_products_count_what_torchs_counter_leaves_out() -> None:
    """torch's counter has no formula for ``addmm_``, ``mv`` or ``dot``: their work is still 2·M·N·K."""
    in_place = measure(Call(lambda c, a, b: c.clone().addmm_(a, b)), [r(8, 4), r(8, 16), r(16, 4)])
    assert in_place["flops"] == 2 * 8 * 4 * 16
    assert measure(Call(torch.mv), [r(8, 16), r(16)])["flops"] == 2 * 8 * 16
    assert measure(Call(torch.dot), [r(16), r(16)])["flops"] == 2 * 16


def test_recurrent_layers_are_said_to_be_uncounted() -> None:
    floor = measure(nn.LSTM(8, 16, batch_first=True), [torch.randn(2, 5, 8)])
    assert floor["flops"] == 0 and "recurrent layers" in floor["note"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_dominant_dtype_is_the_one_holding_most_bytes(dtype: torch.dtype) -> None:
    def mixed(big: torch.Tensor, small: torch.Tensor) -> torch.Tensor:
        return big * small.to(big.dtype).sum()

    floor = measure(Call(mixed), [torch.randn(1000).to(dtype), torch.randn(10)])
    assert floor["dtype"] == str(dtype).removeprefix("torch.")
    assert floor["dtypes"] == sorted({"float32", floor["dtype"]})


SAME_AS_TORCH: dict[str, tuple[Callable[[], nn.Module], Callable[[], list[torch.Tensor]]]] = {
    "matmul": (lambda: Call(torch.matmul), lambda: [r(8, 16), r(16, 4)]),
    "matmul broadcast": (lambda: Call(torch.matmul), lambda: [r(3, 8, 16), r(16, 4)]),
    "vector @ batch": (lambda: Call(lambda a, b: a @ b), lambda: [r(16), r(2, 16, 4)]),
    "__rmatmul__": (lambda: Call(lambda a, b: b.__rmatmul__(a)), lambda: [r(8, 16), r(16, 4)]),
    "mm": (lambda: Call(lambda a, b: a.mm(b)), lambda: [r(8, 16), r(16, 4)]),
    "bmm": (lambda: Call(torch.bmm), lambda: [r(3, 8, 16), r(3, 16, 4)]),
    "addmm": (lambda: Call(torch.addmm), lambda: [r(8, 4), r(8, 16), r(16, 4)]),
    "baddbmm": (lambda: Call(torch.baddbmm), lambda: [r(3, 8, 4), r(3, 8, 16), r(3, 16, 4)]),
    "linear 3-d": (lambda: nn.Linear(16, 12), lambda: [r(2, 5, 16)]),
    "mlp": (lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)), lambda: [r(4, 32)]),
    "conv1d": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1), lambda: [r(2, 4, 17)]),
    "conv2d groups": (lambda: nn.Conv2d(8, 12, 3, groups=4, dilation=2), lambda: [r(2, 8, 15, 13)]),
    "conv3d": (lambda: nn.Conv3d(3, 5, (2, 3, 3)), lambda: [r(1, 3, 6, 7, 8)]),
    "conv_transpose1d": (lambda: nn.ConvTranspose1d(4, 3, 5, stride=3), lambda: [r(2, 4, 9)]),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(6, 4, 3, stride=2, groups=2, output_padding=1),
                         lambda: [r(2, 6, 5, 7)]),
    "conv_transpose3d": (lambda: nn.ConvTranspose3d(2, 3, 2, stride=2), lambda: [r(1, 2, 3, 4, 5)]),
    "einsum": (lambda: Call(lambda a, b: torch.einsum("bij,bjk->bik", a, b)), lambda: [r(3, 8, 16), r(3, 16, 4)]),
    "einsum list": (lambda: Call(lambda a, b: torch.einsum("ij,jk", [a, b])), lambda: [r(8, 16), r(16, 4)]),
    "tensordot": (lambda: Call(lambda a, b: torch.tensordot(a, b, dims=2)), lambda: [r(3, 4, 5), r(4, 5, 6)]),
    "tensordot pairs": (lambda: Call(lambda a, b: torch.tensordot(a, b, dims=([1, 0], [0, 2]))),
                        lambda: [r(3, 4, 5), r(4, 6, 3)]),
    "sdpa": (lambda: Call(F.scaled_dot_product_attention), lambda: [r(2, 3, 8, 16), r(2, 3, 10, 16), r(2, 3, 10, 12)]),
    "multi-head attention": (lambda: nn.MultiheadAttention(16, 4), lambda: [r(5, 2, 16), r(7, 2, 16), r(7, 2, 16)]),
    "attention batch first": (lambda: nn.MultiheadAttention(16, 4, batch_first=True),
                              lambda: [r(2, 5, 16), r(2, 7, 16), r(2, 7, 16)]),
    "attention kdim vdim": (lambda: nn.MultiheadAttention(16, 4, kdim=6, vdim=10),
                            lambda: [r(5, 2, 16), r(7, 2, 6), r(7, 2, 10)]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(SAME_AS_TORCH))
def test_the_flop_count_equals_torchs_own_counter(case: str) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    make_model, make_inputs = SAME_AS_TORCH[case]
    torch.manual_seed(0)
    model, inputs = make_model(), make_inputs()
    torchs = FlopCounterMode(display=False)
    with torch.no_grad(), torchs:
        model(*inputs)
    assert torchs.get_total_flops() > 0
    assert measure(model, inputs)["flops"] == torchs.get_total_flops()
