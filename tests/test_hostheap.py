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

# Page faults taken by a round of forty 2 MiB allocations, each written, all then freed: the pages a round
# finds already mapped cost none. The first round maps them in any case. Both processes start from glibc's
# own starting mmap threshold (128 KiB, fixed, so it cannot grow with what torch's import freed, which made
# the default's faults depend on the process's history): there every 2 MiB chunk is mapped and unmapped
# anew. keep_freed_memory must then win over it.
ROUND_FAULTS = """
import ctypes, resource, sys
import torch
from engine.eval.hostheap import M_MMAP_THRESHOLD, keep_freed_memory
assert ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1
if sys.argv[1] == "kept":
    assert keep_freed_memory()
def faults_of_round():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    held = [torch.empty(2 << 20, dtype=torch.uint8).fill_(1) for _ in range(40)]
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
    """From glibc's starting threshold the freed 80 MiB goes back to the kernel and every round writes new
    pages again (about twenty thousand faults, a third of a millisecond per MiB); kept, none."""
    assert _faults("default") > 10000
    assert _faults("kept") < 100


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
