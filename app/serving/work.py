"""Long work: the one way the lab runs an engine computation.

A piece of work (Work) is what the engine states of a computation before it starts: what it is, its slices (each
a bounded amount of work: a padded pass, a batch of Integrated Gradients' steps, a block's measure) and its peak
memory, computed from its shapes. Works runs it: its memory taken from the budget at once (never a part held
while it waits for the rest), then one slice per turn of the gate on the model's thread, so that a learner's
analyze waits for one slice of it at most; the process's freed memory given back after a slice that grew it past
its bound; the result of the last slice returned, or each slice's result as it comes (stream). Work that several
requests ask for at a time is computed once (once), and called off at its next slice when the last of them has
gone; work that takes long says how far it is (Progress), to this worker's requests and, through the shared spec
store, to every other worker's. A turn may also take along the jobs waiting behind it into one padded pass
(batched): a class pressing Enter at once shares its passes."""

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from app.engine.engine import Engine
from app.engine.placement import work_bytes
from app.engine.threads import ModelThreads
from app.serving.gate import ANYONE, Client, PassGate, Stopping
from app.serving.memory import Budget, trim_if_over
from app.serving.spec_store import SpecStore, StoreError
from app.settings import ENV_PREFIX

Result = TypeVar("Result")
log = logging.getLogger("uvicorn.error")  # uvicorn shows its INFO lines
PROGRESS_EVERY = 0.2  # seconds between a long work's words to the shared store (a few slices)
# Rounds of the event loop a batched turn lets run before it takes the jobs waiting (Works._arrivals): it stops
# after QUIET_ROUNDS in a row that bring nobody new to the gate, and after MAX_ARRIVAL_ROUNDS in all.
QUIET_ROUNDS = 3
MAX_ARRIVAL_ROUNDS = 200


@dataclass
class Work(Generic[Result]):
    """An engine computation as the engine states it before it starts."""

    what: str  # for the log and for a refusal: "the index 3f…", "ALTI of block 2 of run 7a…"
    slices: Iterable[Callable[[], Result]]  # one per turn of the gate; the next is asked for once the last has run
    nbytes: int = 0  # its peak memory beside the model, from its shapes (the engine's *_bytes functions)
    on: Engine | None = None  # the model its passes run on: on a GPU, the device's budget is taken too


class Joins(Protocol):
    """Which jobs waiting at the gate may join a batched turn (called with each in turn order), and the memory
    they took to do so, given back once the turn's work is done."""

    def __call__(self, job: object) -> bool: ...

    def give_back(self) -> None: ...


class Progress:
    """How far a long work is: said by its slices on the model's thread, read by this worker's requests, and told
    to the shared store at most every PROGRESS_EVERY seconds for the other workers'. Once it is over (done or
    called off), a slice still finishing on the model's thread says nothing more."""

    def __init__(self, works: "Works", key: str):
        self.works, self.key = works, key
        self.done, self.total = 0, 0
        self._said = 0.0
        self._over = False
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            if self._over:
                return
            self.done, self.total = done, total
            if time.monotonic() - self._said >= PROGRESS_EVERY:
                self._said = time.monotonic()
                self.works.tell_store(self.key, done, total)

    def end(self) -> None:
        with self._lock:
            self._over = True
            self.works.tell_store(self.key, -1, -1)


class Works:
    """Runs every engine computation of one lab process: the gate (turns at the model), the memory budget (the
    host's, and each GPU's for work on a model there), the model's threads, and the shared store for progress."""

    def __init__(
        self,
        gate: PassGate,
        budget: Budget,
        store: SpecStore,
        max_device_bytes: int = 0,
        max_batch: int = 64,
        trim_above: Callable[[], int] = lambda: 2**62,
    ):
        """`max_device_bytes`: each GPU's memory for the work done there (0: its free memory, work_bytes);
        `max_batch`: jobs one batched turn may take along, its own included; `trim_above`: the process's resident
        bytes past which the memory a slice freed is given back to the system."""
        self.gate, self.budget, self.store = gate, budget, store
        self.threads = ModelThreads(gate.max_passes)  # the cores go to the passes (app.engine.threads)
        self.max_device_bytes = max_device_bytes
        self.device_budgets: dict[str, Budget | None] = {}
        self.max_batch = max_batch
        self.trim_above = trim_above
        self._underway: dict[str, asyncio.Future] = {}  # work several requests may wait for, by key
        self._waiters: Counter[str] = Counter()
        self._progress: dict[str, Progress] = {}  # long work under way on this worker, by key

    def close(self) -> None:
        self.threads.close()

    def device_budget(self, engine: Engine) -> Budget | None:
        """The memory of the GPU the engine's model runs on, for the work done there (None on the CPU)."""
        device = engine.loaded.device
        if str(device) not in self.device_budgets:
            max_bytes, host = work_bytes(device, self.max_device_bytes), self.budget
            self.device_budgets[str(device)] = (
                None
                if max_bytes is None
                else Budget(
                    max_bytes,
                    host.max_waiting,
                    host.max_wait_seconds,
                    host.max_waiting_per_client,
                    host.max_waiting_per_address,
                    setting=f"{ENV_PREFIX}MAX_DEVICE_BYTES",
                )
            )
        return self.device_budgets[str(device)]

    def budgets(self, engine: Engine | None) -> list[Budget]:
        """The budgets work on the engine's model takes from: the host's, and its GPU's where it runs on one."""
        device = None if engine is None else self.device_budget(engine)
        return [self.budget] if device is None else [self.budget, device]

    @asynccontextmanager
    async def taking(self, nbytes: int, client: Client, what: str, on: Engine | None = None) -> AsyncIterator[None]:
        """`nbytes` of the host's memory budget, and of the GPU's too where work runs on a model there (`on`)."""
        device = None if on is None else self.device_budget(on)
        async with self.budget.take(nbytes, client, what):
            if device is None:
                yield
            else:
                async with device.take(nbytes, client, f"{what} on {on.loaded.device}"):
                    yield

    async def run(self, work: Work[Result], client: Client = ANYONE) -> Result:
        """The work's result: its memory taken first, then one slice per turn of the gate; the result of the
        last slice. Between slices the turn goes to whoever's it is; a request cancelled meanwhile (its client
        left) stops here, once the slice under way has ended."""
        last = None
        async for result in self.stream(work, client):
            last = result
        return last

    async def stream(self, work: Work[Result], client: Client = ANYONE) -> AsyncIterator[Result]:
        """Each slice's result as it comes (run's, one by one): a consumer that stops early (its client left)
        calls the work off at its next slice."""
        done = 0
        slices = Slices(work.slices)
        try:
            async with self.taking(work.nbytes, client, work.what, work.on):
                while not slices.over:
                    async with self.gate.admit(client):
                        result = await self._on_thread(slices.next)
                    if slices.ran:
                        done += 1
                        yield result
        except (asyncio.CancelledError, GeneratorExit):
            log.info("%s called off after %d slices: nobody waits for it any more", work.what, done)
            raise
        except Stopping:
            log.info("%s stopped after %d slices: the server is stopping", work.what, done)
            raise

    async def on_thread(self, what: str, nbytes: int, work: Callable[[], Result], client: Client = ANYONE) -> Result:
        """Work outside the gate on a worker thread (a view's computation on a run's kept activations: whole
        blocks of weights, a rollout, an answer's JSON), holding `nbytes` of the budget, its peak from its
        shapes."""
        async with self.budget.take(nbytes, client, what):
            return await asyncio.to_thread(self._trimmed, work)

    async def batched(
        self,
        what: str,
        job: object,
        nbytes: int,
        compute: Callable[[list], list],
        joins: Callable[[], Joins],
        client: Client = ANYONE,
        on: Engine | None = None,
        short: bool = False,
    ):
        """The outcome of `job` from one turn of the gate, its `nbytes` taken first: the turn takes along the
        jobs waiting behind it (in the gate's fair order) that `joins()` accepts, and `compute` does them all
        on the model's thread, [job, *joined] -> an outcome or an exception each. A job claimed by another
        request's turn while it waits is answered from that turn instead. `short`: a short pass, which goes
        before heavy work's slices (PassGate.admit). The turn's work goes on for the jobs it took if this
        request goes away meanwhile."""
        async with self.taking(nbytes, client, what, on), self.gate.admit(client, job=job, short=short) as claimed:
            if claimed is not None:
                return await claimed
            await self._arrivals()
            accepts = joins()
            try:
                others = self.gate.claim(accepts, self.max_batch - 1)
            except BaseException:
                accepts.give_back()
                raise
            done = asyncio.ensure_future(self.threads.run(self._trimmed, compute, [job, *(job for job, _ in others)]))
            done.add_done_callback(lambda _: accepts.give_back())
            done.add_done_callback(lambda _: answer_claimed(done, [answer for _, answer in others]))
            outcomes = await self._ended(done)
            if isinstance(outcomes[0], Exception):
                raise outcomes[0]
            return outcomes[0]

    async def once(self, key: str, start: Callable[[], Awaitable[Result]]) -> Result:
        """The one task doing the work under `key`, started if none is under way, awaited by however many
        requests ask for it; once none of them waits any more, it is called off (at its next slice)."""
        task = self._underway.get(key)
        if task is None:
            task = self._underway[key] = asyncio.ensure_future(start())
            task.add_done_callback(lambda done: self._underway.get(key) is done and self._underway.pop(key))
        self._waiters[key] += 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self._waiters[key] == 1 and not task.done():
                task.cancel()
                del self._underway[key]  # a request from now on starts the work anew
            raise
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:
                del self._waiters[key]

    @asynccontextmanager
    async def progress(self, key: str) -> AsyncIterator[Progress]:
        """A long work's progress under `key` while the block runs, then ended (on this worker and in the store)."""
        said = self._progress[key] = Progress(self, key)
        try:
            yield said
        finally:
            if self._progress.get(key) is said:
                del self._progress[key]
            await asyncio.to_thread(said.end)

    async def progress_of(self, key: str) -> tuple[int, int] | None:
        """(done, total) of the long work under `key`, on this worker or (through the shared store) another; None
        where none is under way."""
        said = self._progress.get(key)
        if said is not None:
            return said.done, said.total
        return await asyncio.to_thread(self.store.progress, key)

    def tell_store(self, key: str, done: int, total: int) -> None:
        """Progress for the other workers: a store that does not answer costs them the figure, not the work."""
        try:
            self.store.put_progress(key, done, total)
        except StoreError as error:
            log.warning("progress of %s not shared: %s", key, error)

    def trim(self) -> None:
        """The memory a piece of work freed goes back to the system where the process is past its bound: glibc
        keeps freed blocks for reuse, and passes of other sizes in between fragment its heap until the process
        holds several times what its work uses."""
        trim_if_over(self.trim_above())

    def _trimmed(self, work: Callable[..., Result], *args) -> Result:
        try:
            return work(*args)
        finally:
            self.trim()

    async def _on_thread(self, piece: Callable[[], Result]) -> Result:
        return await self._ended(asyncio.ensure_future(self.threads.run(self._trimmed, piece)))

    @staticmethod
    async def _ended(running: asyncio.Future) -> Result:
        """What the model's thread returns; a request cancelled meanwhile is cancelled once the thread's work
        has ended, so that its turn and its memory are given back when they are free, not before."""
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            await asyncio.wait([running])
            raise

    async def _arrivals(self) -> None:
        """Lets the requests that came in with this one reach the gate before its turn takes those waiting:
        the event loop runs what it has ready, one round at a time, until QUIET_ROUNDS rounds in a row bring
        nobody new to the gate (or a turn's worth waits). A class pressing Enter at once arrives while the
        first request is on its way to the model: its pass ran alone, slowed by the HTTP work of the others'
        arrival, and the other 47 waited for it. A lone request loses a few rounds of an idle loop."""
        quiet, rounds = 0, 0
        while quiet < QUIET_ROUNDS and rounds < MAX_ARRIVAL_ROUNDS and self.gate.waiting < self.max_batch - 1:
            waiting = self.gate.waiting
            await asyncio.sleep(0)
            quiet = quiet + 1 if self.gate.waiting == waiting else 0
            rounds += 1


class Slices:
    """A work's slices, taken from their iterable on the model's thread, never on the event loop: an engine's
    slices are often a generator that reads its whole input before its first slice (an index's corpus tokenized),
    which on the loop held every other request of the lab meanwhile. Each turn runs a slice and takes the next."""

    def __init__(self, slices: Iterable[Callable[[], Result]]):
        self._slices = slices
        self._iterator = None
        self._pending = None
        self.over = False  # no slice is left
        self.ran = False  # the last turn ran a slice (not so where the iterable had none at all)

    def next(self) -> Result:
        if self._iterator is None:
            self._iterator = iter(self._slices)
            self._pending = next(self._iterator, None)
        piece = self._pending
        self.ran = piece is not None
        if piece is None:
            self.over = True
            return None
        result = piece()
        self._pending = next(self._iterator, None)
        self.over = self._pending is None
        return result


def answer_claimed(done: asyncio.Future, answers: list[asyncio.Future]) -> None:
    """The outcomes of a batched turn's work (the claimer's first) to the requests it took along."""
    for index, answer in enumerate(answers, start=1):
        if answer.done():  # its request went away meanwhile
            continue
        if done.cancelled():
            answer.cancel()
        elif done.exception() is not None:
            answer.set_exception(done.exception())
        elif isinstance(done.result()[index], Exception):
            answer.set_exception(done.result()[index])
        else:
            answer.set_result(done.result()[index])
