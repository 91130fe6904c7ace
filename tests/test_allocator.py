"""privfgl.allocator: glibc keeps freed memory only where a run's activations pass its mmap ceiling."""
import subprocess
import sys

import pytest

from privfgl.allocator import GLIBC_MMAP_CEILING, apply

# In a fresh interpreter (the setting holds for the rest of a process): page faults of 40 fresh
# 64 MB tensors (above glibc's mmap ceiling) under glibc's default, then after `auto` for a large run.
PROBE = """
import resource, torch
from privfgl.allocator import GLIBC_MMAP_CEILING, apply

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        x = torch.ones(16 * 2**20) * 2.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

torch.set_num_threads(1)
small = apply("auto", GLIBC_MMAP_CEILING)
system = faults()
large = apply("auto", GLIBC_MMAP_CEILING + 1)
print(small, system, large, faults(), apply("system", 0))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_auto_keeps_freed_memory_only_past_the_mmap_ceiling_and_then_large_tensors_stop_faulting():
    small, faults_system, large, faults_kept, after = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    assert (small, large) == ("system", "keep")
    # every page of every block faults (16k per block) under glibc's default; kept, the heap grows to a
    # few blocks once and they are reused (measured: 655k against 131k faults)
    assert int(faults_system) > 500_000 and int(faults_kept) < int(faults_system) / 3
    assert after == "keep"  # process-wide from then on, and recorded as such


def test_small_runs_leave_glibc_alone_and_other_choices_are_refused():
    assert apply("auto", GLIBC_MMAP_CEILING) == "system" and apply("system", 10**12) == "system"
    with pytest.raises(ValueError, match="valid: auto, keep, system"):
        apply("sometimes", 0)
