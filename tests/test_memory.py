import subprocess
import sys

import numpy as np

from app.serving.memory import resident_bytes, trim_if_over


def test_trimming_gives_freed_pages_back():
    blocks = [np.ones(1 << 13) for _ in range(8000)]  # 512 MB in 64 kB blocks, below glibc's mmap threshold
    del blocks[::2]  # freed but fragmented: the heap cannot shrink from the top
    before = resident_bytes()
    trim_if_over(before * 2)
    assert resident_bytes() > before - (50 << 20)  # under the limit nothing is given back
    trim_if_over(0)
    assert resident_bytes() < before - (200 << 20)


# Five different 512-token runs kept, as the cache keeps them while it fills, in a fresh process set up as the
# server sets itself up: for each run after the first, its minor page faults against the pages it keeps. The
# runs are computed on another thread than the one that set memory up, as the server's passes are.
KEPT_RUN_FAULTS = """
import resource, sys
from concurrent.futures import ThreadPoolExecutor
from app.serving.memory import PAGE_BYTES, keep_freed_memory, reserve
keep_freed_memory()
from app.engine.model import load_model
from app.engine.runs import Engine
engine = Engine(load_model(), 100_000)
reserve(int(sys.argv[1]))
kept = []

def run(take):
    spec = engine.spec(f"take {take} " + "the river ran past quiet fields " * 90)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    kept.append(engine.run(spec))
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

with ThreadPoolExecutor(1) as passes:
    for take in range(5):
        faults = passes.submit(run, take).result()
        if take:
            print(faults / (sum(kept[-1].storages.values()) / PAGE_BYTES))
"""


def kept_run_faults(reserve_bytes: int) -> list[float]:
    found = subprocess.run(
        [sys.executable, "-c", KEPT_RUN_FAULTS, str(reserve_bytes)], capture_output=True, text=True, check=True
    )
    return [float(line) for line in found.stdout.split()]


def test_runs_on_any_thread_write_to_the_reserved_pages():
    """What the lab reserves at start (written once, on the main thread) is where the runs of its pass
    threads go: they take next to no new pages. Without one arena for every thread, the pass thread would
    take its own memory and fault as above."""
    assert max(kept_run_faults(800 * 1024**2)) < 0.05


# A reserve past glibc's largest trim threshold (2 GiB), in a fresh process set up as the server sets itself up.
LARGE_RESERVE = """
import sys
from app.serving.memory import keep_freed_memory, reserve, resident_bytes
keep_freed_memory()
reserve(int(sys.argv[1]))
print(resident_bytes())
"""


def test_a_reserve_past_the_trim_threshold_is_kept():
    """Freed as one chunk at the heap's top, 2.25 GiB would go back to the system at once (M_TRIM_THRESHOLD
    is at most 2 GiB): the reserve is kept in chunks glibc does not trim."""
    nbytes = 2 * 1024**3 + 256 * 1024**2
    found = subprocess.run(
        [sys.executable, "-c", LARGE_RESERVE, str(nbytes)], capture_output=True, text=True, check=True
    )
    assert int(found.stdout) > nbytes


def test_the_lab_as_started_holds_its_reserve_and_says_so(live_lab):
    """`python -m app` with the default settings: 1 GiB written at start and kept, and a line in its log."""
    with open(f"/proc/{live_lab.process.pid}/status") as status:
        resident = dict(line.split(":", 1) for line in status)["VmRSS"]
    assert int(resident.split()[0]) * 1024 > 1024**3
    assert "Kept 1.00 GiB free for runs" in live_lab.log.read_text()
