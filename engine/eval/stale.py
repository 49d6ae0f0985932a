"""Free memory filled with NaN before each candidate call (ARCHITECTURE.md §3, "Defences"; in the worker).

A kernel that returns ``torch::empty_like(x)`` and never writes part of it passes when the allocator
hands it a block that still holds the reference's output for the same inputs (the reference check ran
them first). ``poison_free_memory`` overwrites what the next allocation can get:

- CUDA: every inactive block of PyTorch's caching allocator (from ``torch.cuda.memory_snapshot``) is
  allocated, filled with 0xFF bytes (NaN in every floating type, -1 in the signed integers) and freed
  again, largest first so that each request lands in the block of its own size (small-pool blocks in
  pieces of at most 1 MiB, the largest request that pool serves);
- CPU: PyTorch takes host memory from ``malloc``; buffers the size of the last outputs are allocated
  (four of each size that glibc keeps on its heap), filled the same way and freed, which is what glibc
  hands out next for those sizes. CPU workers keep freed chunks up to 32 MiB in the heap
  (engine.eval.hostheap), so those are the sizes the fill reaches. What is not feasible on CPU: larger
  chunks go back to the kernel and come back zero-filled from ``mmap``, never stale, and a candidate's own
  ``malloc`` of other sizes may get other chunks. Zeros fail a strong
  task's check and a weak one's spread check (engine.eval.degenerate), so neither hides a stale read.
"""

from __future__ import annotations

from typing import Any

FILL_BYTE = 0xFF


SMALL_REQUEST = 1 << 20  # PyTorch serves requests up to 1 MiB from its small pool (2 MiB segments)
# On CPU, one filled chunk of a size was what the next allocation of that size got in only about half of
# the tries (posix_memalign; measured on the 2-core machine: 1-3 of 5 hits); four of them, 4 of 5 every
# time. Up to glibc's largest mmap threshold only: bigger chunks go back to the kernel when freed anyway.
CPU_COPIES = 4
CPU_HEAP_LIMIT = 32 << 20


def _cuda_inactive_blocks(device: Any) -> list[int]:
    """Request sizes that land in every inactive block, largest first. A small-pool block can be 2 MiB
    while a request over 1 MiB goes to the large pool, so small-pool blocks are asked for in pieces of
    at most 1 MiB (a first try asked for the whole block and filled nothing the candidate then got)."""
    import torch

    large: list[int] = []
    small: list[int] = []
    for segment in torch.cuda.memory_snapshot():
        if segment.get("device") != device.index and device.index is not None:
            continue
        in_small_pool = segment.get("segment_type") == "small"
        for block in segment.get("blocks", []):
            if block.get("state") != "inactive":
                continue
            size = int(block["size"])
            if not in_small_pool:
                large.append(size)
                continue
            while size > 0:
                small.append(min(size, SMALL_REQUEST))
                size -= SMALL_REQUEST
    return sorted(large, reverse=True) + sorted(small, reverse=True)


def poison_free_memory(device: Any, sizes: list[int] | None = None) -> int:
    """Fill what the allocator will hand out next with 0xFF bytes; the bytes filled (every copy counted,
    so the CPU's copies show in the result's ``nan_fill`` record).

    ``sizes``: on CPU, the allocation sizes (bytes) to reach, usually the last call's output sizes.
    """
    import torch

    if device.type == "cuda":
        if not torch.cuda.is_initialized():
            return 0
        device = torch.device("cuda", torch.cuda.current_device()) if device.index is None else device
        sizes = _cuda_inactive_blocks(device)
    held = []
    filled = 0
    for size in sizes or []:
        if size <= 0:
            continue
        # on CPU, several chunks of each heap size: the next allocation of that size lands on one of them
        copies = CPU_COPIES if device.type == "cpu" and size <= CPU_HEAP_LIMIT else 1
        try:
            held.extend(torch.empty(size, dtype=torch.uint8, device=device).fill_(FILL_BYTE) for _ in range(copies))
        except RuntimeError:  # out of memory: fill what fits, never fail the evaluation for it
            break
        filled += size * copies
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    del held
    return filled


def byte_sizes(value: Any) -> list[int]:
    """The storage sizes of the tensors in a (nested) value, for the CPU fill."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value.untyped_storage().nbytes()]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in byte_sizes(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in byte_sizes(v)]
    return []
