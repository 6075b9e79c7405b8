import asyncio
import contextlib
import subprocess
import sys
from contextlib import AsyncExitStack

import numpy as np
import pytest

from app.engine.engine import Engine
from app.serving.gate import ANYONE, Busy, Client, TooManyWaiting
from app.serving.memory import HOLDS, Budget, MemoryTooLarge, resident_bytes, trim_if_over
from tests.conftest import make_lab, run_async


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
from app.engine.engine import Engine
engine = Engine(load_model(), 100_000)
reserve(int(sys.argv[1]))
kept = []

def run(take):
    spec = engine.spec(f"take {take} " + "the river ran past quiet fields " * 90)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    kept.append(engine.compute(spec))
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


class Kept:
    """A cache of entries of given sizes, oldest first, for the budget to let go of."""

    def __init__(self, *sizes: int):
        self.sizes = list(sizes)

    @property
    def held_bytes(self) -> int:
        return sum(self.sizes)

    def let_go_oldest(self) -> bool:
        return bool(self.sizes) and self.sizes.pop(0) >= 0


def test_the_budget_grants_what_fits_and_lets_cached_entries_go_for_it():
    async def scenario():
        budget = Budget(100)
        cache = Kept(30, 30)
        budget.caches.append(cache)
        async with budget.take(20, Client("a")):
            assert budget.held == 80 and cache.sizes == [30, 30]
            async with budget.take(30, Client("b")):  # 110 would pass 100: the oldest entry goes
                assert cache.sizes == [30] and budget.held == 80
        assert budget.granted == 0 and budget.held == 30

    run_async(scenario())


def test_a_computation_past_one_clients_share_is_refused_naming_the_setting():
    budget = Budget(100)
    with pytest.raises(MemoryTooLarge, match="ATTENTION_LAB_MAX_STORE_BYTES"):
        budget.check(51, "ALTI of block 0")


def test_past_the_budget_a_computation_waits_its_turn_round_the_clients():
    """Four computations of 40 from one address, one from another: the other's goes second, not fifth; an
    address never holds more than half."""

    async def scenario():
        budget = Budget(100)
        order, release = [], asyncio.Event()

        async def work(name: str, client: Client):
            async with budget.take(40, client):
                order.append(name)
                assert budget._by_address[False][client.address] <= 50
                await release.wait()

        tasks = [asyncio.create_task(work(f"a{n}", Client("a", str(n)))) for n in range(4)]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(work("b", Client("b"))))
        await asyncio.sleep(0.01)
        assert order == ["a0", "b"] and budget.waiting == 3  # a's second would pass its half
        release.set()
        await asyncio.gather(*tasks)
        assert order == ["a0", "b", "a1", "a2", "a3"] and budget.granted == 0 and budget.waiting == 0

    run_async(scenario())


def test_a_wait_past_the_longest_answers_busy_and_leaves_the_queue():
    async def scenario():
        budget = Budget(100, max_wait_seconds=0.05)
        async with budget.take(45, Client("a")):
            async with budget.take(45, Client("b")):
                with pytest.raises(Busy, match="waited 0.05 s for memory") as busy:
                    async with budget.take(10, Client("c")):
                        pass
        assert busy.value.retry_after > 0 and budget.waiting == 0 and budget.granted == 0

    run_async(scenario())


def test_reads_hold_at_most_a_quarter_and_work_never_waits_for_them():
    """Four requests each hold the 25 bytes of the run they read, then ask 80 for their computation: reads
    take at most a quarter of the budget, so the requests holding them get their work's memory in turn, and the
    two others read once they have answered. Without a request counting its reads, a hold is nothing."""

    async def scenario():
        budget = Budget(200)
        order = []
        assert (await budget.hold(25, Client("x"), "a run", "x")) is None and budget.reading == 0

        async def request(name: str):
            async with AsyncExitStack() as holds:
                HOLDS.set(holds)
                await budget.hold(25, Client(name), "its run", name)
                order.append(f"read {name}")
                async with budget.take(80, Client(name)):
                    order.append(f"work {name}")
                    await asyncio.sleep(0.01)
                    assert budget.held <= 200 and budget.reading <= 50

        await asyncio.gather(*(request(name) for name in "abcd"))
        assert len(order) == 8 and order.index("read c") > order.index("work a")  # c read once a had answered
        assert budget.reading == budget.granted == budget.waiting == 0

    run_async(scenario())


def test_requests_holding_reads_get_the_largest_work_one_client_may_ask_in_turn():
    """Eight requests from eight addresses each hold a read, then ask for the most work one client may: reads
    (at most a quarter), the largest ask and the small asks' reserve fit together, so each is granted in turn
    and none waits for the others' reads (with reads up to half the budget, they waited for each other for ever:
    eight ALTI requests of 512 tokens, at 6% CPU)."""

    async def scenario():
        budget = Budget(1024, max_wait_seconds=5)
        largest = budget.largest()
        granted = []

        async def request(name: str):
            async with AsyncExitStack() as holds:
                HOLDS.set(holds)
                await budget.hold(budget.max_bytes // 8, Client(name), "its run", name)
                async with budget.take(largest, Client(name)):
                    granted.append(name)
                    await asyncio.sleep(0.01)

        await asyncio.gather(*(request(f"10.0.0.{number}") for number in range(8)))
        assert len(granted) == 8 and largest == budget.max_bytes // 2

    run_async(scenario())


def test_a_small_ask_is_not_held_behind_a_large_one_that_does_not_fit_yet():
    async def scenario():
        budget = Budget(200)
        async with budget.take(90, Client("a")), budget.take(60, Client("c")):
            large = asyncio.create_task(budget._ask(100, Client("b"), "ALTI", reads=False))
            await asyncio.sleep(0)
            async with budget.take(10, Client("learner")):  # 160 fit, beside the 100 waiting
                assert not large.done()
        await large
        assert budget.granted == 100

    run_async(scenario())


def test_one_run_read_by_many_requests_is_counted_once_until_the_last_has_answered():
    async def scenario():
        budget = Budget(200)  # an address may read an eighth: 25
        stacks = [AsyncExitStack() for _ in range(10)]
        for n, stack in enumerate(stacks):
            HOLDS.set(stack)
            await budget.hold(25, Client(f"127.0.0.{n}"), "the run", "run")
        assert budget.reading == 25
        for stack in stacks:
            await stack.aclose()
        assert budget.reading == 0 and not budget._by_address[True]

    run_async(scenario())


def test_large_work_leaves_a_reserve_that_a_short_pass_always_finds():
    """Large computations fill all the budget but its last 1/16; a small ask (a learner's short pass) is granted
    at once beside them, a large one waits."""

    async def scenario():
        budget = Budget(6400)
        async with budget.take(3000, Client("a")), budget.take(3000, Client("b")):  # 6,000 of the 6,000 allowed
            large = asyncio.create_task(budget._ask(200, Client("c"), "ALTI", reads=False))
            await asyncio.sleep(0)
            assert not large.done() and budget.waiting == 1
            async with budget.take(100, Client("learner")):  # 1/64 of the budget: from the reserve
                assert budget.granted == 6100
            large.cancel()

    run_async(scenario())


def test_a_short_pass_is_not_held_behind_a_hog_at_its_own_address():
    """A prankster's large asks fill its address's share and more wait behind them; a learner at the same
    address (a school's one NAT) is granted a short pass at once, not after the prankster's queue."""

    async def scenario():
        budget = Budget(6400)
        hog = Client("127.0.0.1")
        async with budget.take(3200, hog):  # the address's half
            waiting = [asyncio.create_task(budget._ask(1000, hog, "a pass", reads=False)) for _ in range(3)]
            await asyncio.sleep(0)
            assert budget.waiting == 3
            async with budget.take(100, Client("127.0.0.1", "learner")):
                assert budget.granted == 3300 and budget.waiting == 3
            for ask in waiting:
                ask.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert budget.granted == 0 and budget.waiting == 0

    run_async(scenario())


def test_one_clients_queue_for_memory_is_bounded_as_at_the_gate():
    async def scenario():
        budget = Budget(100, max_waiting_per_client=2, max_waiting_per_address=3)
        async with budget.take(50, Client("a")):
            asks = [asyncio.create_task(budget._ask(50, Client("a"), "a pass", reads=False)) for _ in range(2)]
            await asyncio.sleep(0)
            with pytest.raises(TooManyWaiting, match="you already have 2 requests waiting for memory"):
                await budget._ask(50, Client("a"), "a pass", reads=False)
            asks.append(asyncio.create_task(budget._ask(50, Client("a", "tab"), "a pass", reads=False)))
            await asyncio.sleep(0)
            with pytest.raises(TooManyWaiting, match="this address already has 3 requests waiting"):
                await budget._ask(50, Client("a", "another tab"), "a pass", reads=False)
            for ask in asks:
                ask.cancel()
        await asyncio.gather(*asks, return_exceptions=True)
        assert budget.waiting == 0

    run_async(scenario())


def test_work_on_a_gpu_takes_its_peak_from_the_devices_budget_apart_from_the_hosts(tiny, tmp_path, monkeypatch):
    """The device's budget (app.engine.placement.work_bytes; the CPU has none, so a stand-in for a GPU's here): a
    pass the host has room for but the device has not is refused naming the device's setting, and a pass that
    fits takes its peak from both and gives both back."""
    lab = make_lab(tiny, tmp_path)
    engine = lab.models.loaded(lab.models.default)
    long, short = engine.spec("word " * 150), engine.spec("a short prompt")
    device_bytes = engine.footprint.pass_bytes([engine.length(long)])  # one client may take half of it at once
    assert engine.footprint.pass_bytes([lab._length(engine, short)]) < device_bytes // 2 < lab.budget.max_bytes // 2
    monkeypatch.setattr("app.serving.work.work_bytes", lambda device, chosen: chosen or device_bytes)
    device = lab.works.device_budget(engine)
    assert device is not lab.budget and device.max_bytes == device_bytes
    with pytest.raises(MemoryTooLarge, match="ATTENTION_LAB_MAX_DEVICE_BYTES"):
        run_async(lab.serve_spec(long))
    taken = []

    async def watched(nbytes, client=ANYONE, what=""):
        taken.append((lab.budget.granted, device.granted))
        async with original(nbytes, client, what):
            taken.append((lab.budget.granted, device.granted))
            yield

    original = device.take
    monkeypatch.setattr(device, "take", contextlib.asynccontextmanager(watched))
    run_async(lab.serve_spec(short))
    nbytes = engine.footprint.pass_bytes([lab._length(engine, short)])
    assert taken == [(nbytes, 0), (nbytes, nbytes)]  # the host's first, then the device's
    assert (lab.budget.granted, device.granted) == (0, 0)


def test_the_budget_counts_the_weights_of_every_loaded_model(tiny, minilm, tmp_path):
    """A model's weights are held in the budget beside the runs (Models.held_bytes), whatever its dtype."""
    lab = make_lab(minilm, tmp_path)
    weights = {
        loaded.name: sum(tensor.numel() * tensor.element_size() for tensor in loaded.model.state_dict().values())
        for loaded in (minilm, tiny)
    }
    others = lab.budget.held - lab.models.held_bytes  # the caches' and the work's
    assert lab.models.held_bytes == weights[minilm.name]
    lab.models._engines[tiny.name] = Engine(tiny, 1000)
    assert lab.budget.held - others == weights[minilm.name] + weights[tiny.name]
