"""``engine/eval/hostheap.py``: a CPU worker's freed memory stays mapped, so a call's cost is its work.

Each case runs in a new interpreter: the thresholds are process-wide, and the test process's own
allocations (xdist's threads) would blur what glibc does.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")

# Page faults taken by a round of forty 100 KiB allocations, each written, all then freed: the pages a
# round finds already mapped cost none. The first round maps them in any case.
ROUND_FAULTS = """
import resource, sys
import torch
from engine.eval.hostheap import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
def faults_of_round():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [torch.empty(100 * 1024, dtype=torch.uint8).fill_(1) for _ in range(40)]
    del held
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_round()
print(min(faults_of_round() for _ in range(3)))
"""


def _faults(mode: str) -> int:
    run = subprocess.run([sys.executable, "-c", ROUND_FAULTS, mode], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.split()[-1])


def test_freed_memory_stays_mapped_so_the_next_round_takes_no_page_faults() -> None:
    """By default glibc trims the freed 4 MiB off the heap's top and every round writes new pages again
    (about a thousand faults, a third of a millisecond per MiB); with the thresholds kept, none."""
    assert _faults("default") > 500
    assert _faults("kept") < 20


FILL_HITS = """
import torch
from engine.eval.hostheap import keep_freed_memory
from engine.eval.stale import poison_free_memory
assert keep_freed_memory()
for size in (64 * 1024, 1 << 20, 4 << 20):
    hits = 0
    for _ in range(20):
        poison_free_memory(torch.device("cpu"), [size])
        fresh = torch.empty(size, dtype=torch.uint8)
        hits += int(bool(fresh[size // 2 :].view(torch.float32).isnan().all()))  # what a float read gets
    print(size, hits)
"""


def test_the_cpu_fill_reaches_a_same_sized_allocation_that_follows_it_in_a_worker() -> None:
    """glibc hands a freed chunk of the same size out next: in a process set up as a CPU worker is, what
    ``torch.empty`` then holds is the NaN fill (engine.eval.stale), for heap sizes up to several MiB."""
    run = subprocess.run([sys.executable, "-c", FILL_HITS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    hits = {int(size): int(count) for size, count in (line.split() for line in run.stdout.splitlines())}
    assert all(count >= 15 for count in hits.values()), hits  # the allocator's bookkeeping may take a chunk's start
