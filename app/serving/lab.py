"""Serving runs: each worker keeps recent runs, computes one pass per run however many ask for it at a
time, takes turns at the model through the gate, and recomputes from the shared spec store any run it does
not hold. The numbers come from the engine (app.engine.runs).

Heavy work takes turns in slices (in_turns), each a bounded amount of work: Integrated Gradients a batch of
steps (app.engine.attribution), activation patching one padded pass of several cells (app.engine.patches), a
measure's block a few chunks of queries (norm and ALTI rollout one slice per block, app.engine.measures), a
model's load its weights, then its digest 128 MB at a time (app.engine.model.load_steps). Between two slices
the model goes to whoever's turn it is, so a learner's analyze waits for one slice at most, and work whose
requests have all gone (their clients disconnected) stops at its next slice. A measure's blocks are computed
once however many ask for them at a time, and kept in the run cache beside the runs (by run id, measure and
block), within its bound in bytes."""

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from torch import Tensor
from transformers import PreTrainedModel

from app.engine import cells, faithfulness, measures, patches
from app.engine.atlas import (
    Atlas,
    Projection,
    atlas_bytes,
    atlas_slices,
    check_ablation,
    check_atlas,
    project,
    space_slices,
)
from app.engine.attribution import steps_per_slice
from app.engine.blocks import BlockCache
from app.engine.capture import MADE_WEIGHTS_BYTES
from app.engine.choices import Placement
from app.engine.model import LoadedModel, in_float32, upcast_bytes
from app.engine.placement import work_bytes
from app.engine.runs import BATCH_TOKENS, Engine, Run
from app.engine.spec import RUN_ID, AtlasSpec, RunSpec
from app.engine.threads import ModelThreads
from app.serving.cache import RunCache
from app.serving.gate import ANYONE, Client, PassGate, Stopping
from app.serving.memory import Budget, trim_if_over
from app.serving.models import Loads, Models
from app.serving.specs import SpecStore, StoreError
from app.settings import ENV_PREFIX

Result = TypeVar("Result")
log = logging.getLogger("uvicorn.error")  # uvicorn shows its INFO lines
PROGRESS_EVERY = 0.2  # seconds between a corpus run's words to the shared store (a pass takes 10-100 ms)

# The model, torch and the server besides the runs: about 0.45 GB measured, with room for a pass in flight.
RUNTIME_BYTES = 1024**3
BLOCK_SHARE = 4  # the share of the cache's bytes kept for computed blocks of weights: a quarter
SHARED_PART = 4  # inputs of at most 1/SHARED_PART of the model's positions share turns
# Rounds of the event loop a pass lets run before it takes the requests waiting (Lab._arrivals): it stops after
# QUIET_ROUNDS in a row that bring nobody new to the gate, and after MAX_ARRIVAL_ROUNDS in all.
QUIET_ROUNDS = 3
MAX_ARRIVAL_ROUNDS = 200


class RunNotFound(KeyError):
    def __str__(self) -> str:
        return f"run {self.args[0]} is not kept any more (or never was): analyze the text again"


class AtlasNotFound(RunNotFound):
    def __str__(self) -> str:
        return f"atlas {self.args[0]} is not kept any more (or never was): start the corpus run again"


class ForeignRun(RunNotFound):
    """The spec names another model than the one this lab serves: recomputing it would give other numbers."""

    def __str__(self) -> str:
        run_id, spec, loaded = self.args
        return (
            f"run {run_id} was made by {spec.model} (weights {spec.model_digest[:12]}) and this lab serves "
            f"{loaded.name} (weights {loaded.digest[:12]}): analyze the text again"
        )


@dataclass
class Measured:
    """One block of a measure, kept in the run cache (its bytes count against the cache's bound)."""

    block: Tensor  # [head (or 1), query, key]
    storages: dict[int, int] = field(init=False)

    def __post_init__(self):
        storage = self.block.untyped_storage()
        self.storages = {storage.data_ptr(): storage.nbytes()}


@dataclass
class Space:
    """A head's projected queries and keys, kept in the run cache (a few hundred KB, not counted)."""

    points: dict
    storages: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False)
class Blocks:
    """Blocks of a run's weights a view waits for (Lab._computed_weights), offered at the gate to the turn of
    whoever computes blocks first."""

    run: Run
    layers: list[int]

    @property
    def nbytes(self) -> int:
        return len(self.layers) * self.run.block_bytes


def compute_blocks(jobs: list[Blocks]) -> list[dict[int, Tensor] | Exception]:
    """Each job's blocks, by block (Run.weights: computed, and kept in the block cache), or its exception."""
    outcomes: list[dict[int, Tensor] | Exception] = []
    for job in jobs:
        try:
            outcomes.append({layer: job.run.weights(layer) for layer in job.layers})
        except Exception as error:  # this view fails, the others are answered
            outcomes.append(error)
    return outcomes


def answer_claimed(done: asyncio.Future, answers: list[asyncio.Future]) -> None:
    """The outcomes of a turn's work (compute_blocks: the claimer's first) to the requests it took along."""
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


ADDED_TOKENS = 16  # tokens a tokenizer adds around a text or a pair, at most ([CLS], [SEP], <s>, a "▁")
SHORT_TOKENS = 256  # a text whose bytes bound its tokens below this many is not tokenized to state its pass
SHORT_PASS_TOKENS = 128  # a pass of at most this many tokens goes before heavy work's slices (PassGate.admit)


class Joins:
    """Lab._joins's test of a waiting spec, with the memory the joined pass takes beyond the first spec's."""

    def __init__(self, engine: Engine, spec: RunSpec, own: int, budgets: list[Budget], client: Client):
        self.engine, self.spec, self.budgets, self.client = engine, spec, budgets, client
        self.shared = engine.max_tokens // SHARED_PART
        self.count, self.longest = 1, None  # the spec's own length is read only when someone waits to join it
        self.own = own  # the first spec's pass, taken with its turn
        self.taken = 0

    def __call__(self, job: object) -> bool:
        if not isinstance(job, RunSpec) or job.model != self.spec.model:
            return False
        self.longest = self.longest or self.engine.read_ahead(self.spec)
        padded_to = max(self.longest, self.engine.read_ahead(job))
        if padded_to > self.shared or (self.count + 1) * padded_to > BATCH_TOKENS:
            return False
        more = self.engine.pass_bytes([padded_to] * (self.count + 1)) - self.own - self.taken
        if more > 0:
            took = [budget for budget in self.budgets if budget.try_take(more, self.client)]
            if len(took) < len(self.budgets):
                for budget in took:
                    budget.give_back(more, self.client)
                return False
        self.taken += max(more, 0)
        self.count, self.longest = self.count + 1, padded_to
        return True

    def give_back(self) -> None:
        for budget in self.budgets:
            budget.give_back(self.taken, self.client)


class Lab:
    def __init__(
        self,
        loaded: LoadedModel,
        specs: SpecStore,
        gate: PassGate,
        *,
        max_chars: int,
        max_tokens: int | None = None,
        max_runs: int,
        max_cache_bytes: int,
        folders: list[Path] = (),
        max_loaded_models: int = 3,
        max_batch_runs: int = 64,
        max_attribution_step_tokens: int | None = None,
        max_patch_tokens: int | None = None,
        max_ablation_tokens: int | None = None,
        model_loads_per_hour: int = 20,
        placement: Placement | None = None,
        max_device_bytes: int = 0,
    ):
        """`loaded`: the default model; `folders`: more models, loaded when first asked for, in `placement`'s
        dtype and device where they do not choose their own (by default: decided at load, their weights within
        max_cache_bytes). `max_device_bytes`: each GPU's memory for the work done there (0: its free memory,
        app.engine.placement.work_bytes)."""
        # One budget of memory for what is kept and the work under way (app.serving.memory.Budget): every
        # computation takes its bytes from it before it starts. What is kept is bounded within it too: a quarter
        # for computed blocks of weights (Run.weights, each N² floats a head), the rest for the runs and the
        # other measures' blocks; work under way lets the least recently used of them go where it needs room.
        self.budget = Budget(
            max_cache_bytes,
            gate.max_waiting,
            gate.max_wait_seconds,
            gate.max_waiting_per_client,
            gate.max_waiting_per_address,
        )
        self.blocks = BlockCache(max_cache_bytes // BLOCK_SHARE)
        placement = placement or Placement(host_budget_bytes=max_cache_bytes)
        self.models = Models(loaded, list(folders), max_chars, max_tokens, max_loaded_models, self.blocks, placement)
        self.loads = Loads(model_loads_per_hour)
        self.max_attribution_step_tokens = max_attribution_step_tokens
        self.max_patch_tokens = max_patch_tokens
        self.max_ablation_tokens = max_ablation_tokens
        self.specs = specs
        self.gate = gate
        self.model_threads = ModelThreads(gate.max_passes)  # the cores go to the passes (app.engine.threads)
        self.max_batch_runs = max_batch_runs  # runs one turn at the model may compute together
        self.runs: RunCache[Run] = RunCache(max_runs, max_cache_bytes - self.blocks.max_bytes)
        self.budget.caches = [self.blocks, self.runs, self.models]
        # A GPU's memory apart from the host's: a pass makes its activations there before they come to the host,
        # so work on a model there takes its peak from both (Lab.taking). Made when its first model is loaded.
        self.max_device_bytes = max_device_bytes
        self.device_budgets: dict[str, Budget] = {}
        # Passes under way, by run id: a request for the same run meanwhile awaits that pass. A pass whose
        # waiters have all gone (their clients disconnected) before it started is called off.
        self._passes: dict[str, asyncio.Task] = {}
        self._pooling_passes: dict[str, asyncio.Task] = {}  # the same for a run's pooling pass
        self._waiters: dict[str, int] = {}
        self._started: set[str] = set()
        # Specs waiting to be put in the store, with what their requests await, and the writes under way.
        self._to_store: list[tuple[RunSpec, asyncio.Future]] = []
        self._writers: set[asyncio.Task] = set()
        # Work under way that several requests may wait for (a measure's block), by key, and its waiters.
        self._underway: dict[str, asyncio.Task] = {}
        self._underway_waiters: Counter[str] = Counter()
        self._atlas_progress: dict[str, tuple[int, int]] = {}  # atlas id -> (passes done, passes to do)

    @property
    def engine(self) -> Engine:
        """The default model's engine."""
        return self.models.loaded(self.models.default)

    @property
    def loaded(self) -> LoadedModel:
        return self.engine.loaded

    @property
    def info(self) -> dict:
        return self.engine.info

    def spec(self, *args, **kwargs) -> RunSpec:
        """The checked spec of a request for the default model (app.engine.runs.Engine.spec)."""
        return self.engine.spec(*args, **kwargs)

    async def engine_for(self, model: str | None, client: Client = ANYONE) -> Engine:
        """A model's engine by name (the default for None), loaded if it is not: at a turn of the gate, and
        counted against the client's loads an hour (Loads)."""
        return await self.models.engine(model, lambda name, steps: self._load(name, steps, client))

    async def _load(self, name: str, steps: Iterator[Callable[[], Engine]], client: Client) -> Engine:
        self.loads.take(client.address)
        return await self.in_turns(f"the load of {name}", steps, client)

    def device_budget(self, engine: Engine) -> Budget | None:
        """The memory of the GPU the engine's model runs on, for the work done there (None on the CPU)."""
        device = engine.loaded.device
        budget = self.device_budgets.get(str(device))
        if budget is None:
            max_bytes = work_bytes(device, self.max_device_bytes)
            if max_bytes is None:
                return None
            host = self.budget
            budget = self.device_budgets[str(device)] = Budget(
                max_bytes,
                host.max_waiting,
                host.max_wait_seconds,
                host.max_waiting_per_client,
                host.max_waiting_per_address,
                setting=f"{ENV_PREFIX}MAX_DEVICE_BYTES",
            )
        return budget

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

    async def in_turns(
        self,
        what: str,
        slices: Iterable[Callable[[], Result]],
        client: Client = ANYONE,
        nbytes: int = 0,
        on: Engine | None = None,
    ) -> Result:
        """Runs heavy work (`what`, for the log) one slice per turn at the gate, on the model's thread, and
        returns what the last slice returns (the next slice is asked for once the one before has run), holding
        `nbytes` of the memory budget, its peak as stated before it starts, from the first slice to the last
        (and of the GPU's where the work runs passes of a model there, `on`). Between slices the turn goes to
        whoever's it is; a request cancelled meanwhile (its client left) stops here, and the slice under way is
        the last one done."""
        result, done = None, 0
        try:
            async with self.taking(nbytes, client, what, on):
                for piece in slices:
                    async with self.gate.admit(client):
                        result = await self.model_threads.run(piece)
                    done += 1
        except asyncio.CancelledError:
            log.info("%s called off after %d slices: nobody waits for it any more", what, done)
            raise
        except Stopping:
            log.info("%s stopped after %d slices: the server is stopping", what, done)
            raise
        return result

    async def computed(self, what: str, nbytes: int, work: Callable[[], Result], client: Client = ANYONE) -> Result:
        """Work a view does on a run's kept activations (whole blocks of weights, a rollout, an answer's JSON) on
        a worker thread, holding `nbytes` of the memory budget, its peak as stated from its shapes."""
        async with self.budget.take(nbytes, client, what):
            return await asyncio.to_thread(work)

    async def measured(self, run: Run, measure: str, layer: int | None, client: Client = ANYONE) -> list[Tensor]:
        """A measure of a run, [head (or 1), query, key] for each block, or for block `layer` alone (a valid
        one). The weights are kept in the engine's block cache or computed from the run's q and k (Run.weights),
        with those other views wait for (Lab._weights); another measure's blocks are kept, or computed in
        slices."""
        if layer is not None:
            run.check_layer(layer)  # a block that does not exist is refused before any measuring
        layers = range(run.n_layers) if layer is None else [layer]
        if measure == "weights":
            found = await self._weights(run, list(layers), client)
            return [found[index] for index in layers]
        return [await self._block(run, measure, index, client) for index in layers]

    async def cells(self, run: Run, plan: cells.Plan, window: cells.Window, client: Client = ANYONE) -> Tensor:
        """A window of a view's cells, exact or pooled (app.engine.cells), [layer, head, query, key]. A row
        measure of a run whose blocks are past cells.ROWS_FROM_BYTES is computed a chunk of rows at a time,
        at turns of the gate, and not kept (the page asks for each window once); otherwise, and for ALTI, cut
        from the measure's whole blocks (Lab.measured), kept as ever."""
        if plan.measure in cells.ROW_MEASURES and run.block_bytes > cells.ROWS_FROM_BYTES:
            if plan.measure != "weights":
                run.check_adapter()
            model = (await self.engine_for(run.spec.model, client)).loaded.model
            source = cells.row_source(run, model, plan.measure)
            what = f"{len(window.rows)} × {len(window.cols)} cells of run {run.run_id}"
            slices = cells.window_slices(source, plan, window, len(run.tokens))
            nbytes = cells.window_bytes(plan, window, len(run.tokens))
            return await self.in_turns(what, slices, client, nbytes)
        one = plan.layers[0] if len(plan.layers) == 1 else None
        blocks = await self.measured(run, plan.measure, one, client)
        source = cells.block_source(dict(zip(range(run.n_layers) if one is None else [one], blocks, strict=True)))
        slices = cells.window_slices(source, plan, window, len(run.tokens))
        what = f"{len(window.rows)} × {len(window.cols)} cells of run {run.run_id}"
        async with self.budget.take(cells.window_bytes(plan, window, len(run.tokens)), client, what):
            return await asyncio.to_thread(lambda: [piece() for piece in slices][-1])

    async def _weights(self, run: Run, layers: list[int], client: Client) -> dict[int, Tensor]:
        """These blocks' weights, by block: kept, or computed at turns of the gate on the model's thread, as many
        blocks a turn as take at most MADE_WEIGHTS_BYTES (one a turn past it)."""
        found = {layer: kept for layer in layers if (kept := run.kept_weights(layer)) is not None}
        missing = [layer for layer in layers if layer not in found]
        per_turn = max(1, MADE_WEIGHTS_BYTES // run.block_bytes)
        for start in range(0, len(missing), per_turn):
            found.update(await self._computed_weights(Blocks(run, missing[start : start + per_turn]), client))
        return found

    async def _computed_weights(self, blocks: "Blocks", client: Client) -> dict[int, Tensor]:
        """A view's blocks of weights computed at its turn of the gate, and with them those of the views
        waiting behind it (in the gate's fair order, up to MADE_WEIGHTS_BYTES in all), each of which took its
        memory before it waited: a class whose blocks went (the budget needed their room) asks for them all at
        once, and 48 learners' all-heads views took 288 turns of one small block each. The turn's work goes
        on for the views it took if this request goes away meanwhile."""
        what = f"weights of {len(blocks.layers)} blocks of run {blocks.run.run_id}"
        async with self.budget.take(blocks.nbytes, client, what), self.gate.admit(client, job=blocks) as claimed:
            if claimed is not None:
                return await claimed
            await self._arrivals()
            room = MADE_WEIGHTS_BYTES - blocks.nbytes

            def joins(job: object) -> bool:
                nonlocal room
                if not isinstance(job, Blocks) or job.nbytes > room:
                    return False
                room -= job.nbytes
                return True

            others = self.gate.claim(joins, self.max_batch_runs - 1)
            work = asyncio.ensure_future(self.model_threads.run(compute_blocks, [blocks, *(job for job, _ in others)]))
            work.add_done_callback(lambda done: answer_claimed(done, [answer for _, answer in others]))
            outcomes = await asyncio.shield(work)
            if isinstance(outcomes[0], Exception):
                raise outcomes[0]
            return outcomes[0]

    async def _block(self, run: Run, measure: str, layer: int, client: Client) -> Tensor:
        key = f"{run.run_id}/{measure}/{layer}"
        kept = self.runs.get(key)
        if kept is not None:
            return kept.block
        return await self._once(key, lambda: self._computed_block(key, run, measure, layer, client))

    async def _computed_block(self, key: str, run: Run, measure: str, layer: int, client: Client) -> Tensor:
        if measure == "alti_rollout":  # R_l = C_l R_{l-1}: this block's ALTI and the rollout before it
            contributions = await self._block(run, "alti", layer, client)
            before = await self._block(run, "alti_rollout", layer - 1, client) if layer else None
            slices = [lambda: measures.rolled(contributions, before)]
            nbytes = len(run.tokens) ** 2 * 4
        else:
            model = (await self.engine_for(run.spec.model, client)).loaded.model
            slices = measures.block_slices(run, model, measure, layer)
            nbytes = measures.alti_bytes(run, layer) if measure == "alti" else measures.norm_bytes(run, layer)
        block = await self.in_turns(f"{measure} of block {layer} of run {run.run_id}", slices, client, nbytes)
        self.runs.put(key, Measured(block), counted=False)
        trim_if_over(self.runs.max_bytes + self.blocks.max_bytes + RUNTIME_BYTES + self.models.loaded_bytes)
        return block

    async def _once(self, key: str, start: Callable[[], Awaitable[Result]]) -> Result:
        """The one task doing the work under `key`, started if none is under way, awaited by however many
        requests ask for it; once none of them waits any more, it is called off (at its next slice)."""
        task = self._underway.get(key)
        if task is None:
            task = self._underway[key] = asyncio.ensure_future(start())
            task.add_done_callback(lambda done: self._underway.get(key) is done and self._underway.pop(key))
        self._underway_waiters[key] += 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self._underway_waiters[key] == 1 and not task.done():
                task.cancel()
                del self._underway[key]  # a request from now on starts the work anew
            raise
        finally:
            self._underway_waiters[key] -= 1
            if not self._underway_waiters[key]:
                del self._underway_waiters[key]

    def engine_of(self, run: Run) -> Engine:
        """The engine that computed a run: loaded, since the run was just served (see get_run)."""
        return self.models.loaded(run.spec.model)

    def kept(self, spec: RunSpec) -> Run | None:
        """This worker's run of the spec, if it holds one: no forward pass needed."""
        return self.runs.get(spec.run_id)

    async def submit(self, spec: RunSpec, client: Client = ANYONE) -> Run:
        """analyze() for the server: the run (kept, or computed once however many ask for it at a time),
        then its spec in the shared store, so that every worker can serve the id the client receives.
        `client` is whose turn at the gate this request takes."""
        engine = await self.engine_for(spec.model, client)
        await self._read(engine, spec, client)
        run = await self._computed(spec, client)
        await self._stored(spec)
        return run

    async def _read(self, engine: Engine, spec: RunSpec, client: Client) -> None:
        """The bytes of the spec's run held for the request that reads it (Budget.hold), before it is read."""
        length = self._length(engine, spec)
        what = f"reading a run of {length:,} tokens"
        await self.budget.hold(engine.run_bytes(length), client, what, spec.run_id)

    async def _stored(self, spec: RunSpec) -> None:
        """The spec put in the shared store, in one write with every other spec put at the same moment:
        the requests of a batched pass all resume together, and made 47 writes, a thread hop and a
        transaction (or a Redis round trip) each, in a class's burst."""
        if not self._to_store:  # the first of the moment: the write starts once the others have asked
            writer = asyncio.create_task(self._write_specs())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        stored = asyncio.get_running_loop().create_future()
        self._to_store.append((spec, stored))
        await stored

    async def _write_specs(self) -> None:
        waiting, self._to_store = self._to_store, []
        try:
            await asyncio.to_thread(self.specs.put, *(spec for spec, _ in waiting))
        except Exception as error:  # StoreError, or anything else: no request may wait forever
            for _, stored in waiting:
                if not stored.done():
                    stored.set_exception(error)
        else:
            for _, stored in waiting:
                if not stored.done():
                    stored.set_result(None)

    async def run(self, run_id: str, client: Client = ANYONE) -> Run:
        """A run by id: from this worker's cache, or recomputed from the spec in the shared store; its bytes held
        for the request before it reads it (Budget.hold)."""
        kept = self.runs.get(run_id)
        held = kept is not None
        if held:
            nbytes = sum(kept.storages.values())
            del kept  # not held by this request while it waits for its memory
            await self.budget.hold(nbytes, client, f"reading run {run_id}", run_id)
            run = self.runs.get(run_id)
            if run is not None:
                return run
        spec = await asyncio.to_thread(self.specs.get, run_id) if RUN_ID.fullmatch(run_id) else None
        if not isinstance(spec, RunSpec):
            raise RunNotFound(run_id)
        if spec.model not in self.models.names:
            raise ForeignRun(run_id, spec, self.loaded)
        engine = await self.engine_for(spec.model, client)
        if spec.model_digest != engine.loaded.digest:
            raise ForeignRun(run_id, spec, engine.loaded)
        if not held:
            await self._read(engine, spec, client)
        return await self._computed(spec, client)

    async def pooled(self, run: Run, client: Client = ANYONE) -> Run:
        """The run with its sentence vector: for an input longer than the model's pooling reads, the
        pooling's own pass (Engine.pooling_pass) at a turn of the gate, computed once however many ask for
        it at a time, and the run kept with it."""
        if not run.pooling_pass_due:
            return run
        underway = self._pooling_passes.get(run.run_id)
        if underway is None:
            underway = self._pooling_passes[run.run_id] = asyncio.create_task(self._pooling_pass(run, client))
            underway.add_done_callback(lambda _: self._pooling_passes.pop(run.run_id, None))
        return await asyncio.shield(underway)  # a client that goes away does not call it off for the others

    async def _pooling_pass(self, run: Run, client: Client) -> Run:
        engine = await self.engine_for(run.spec.model, client)  # loaded before the turn, in case it was let go
        what = f"the pooling pass of run {run.run_id}"
        async with self.taking(engine.pooling_bytes(), client, what, on=engine), self.gate.admit(client):
            return await self.model_threads.run(self._with_sentence_vector, run)

    def _with_sentence_vector(self, run: Run) -> Run:
        """Engine.with_sentence_vector, and the new run kept in the old one's place (its bytes counted)."""
        pooled = self.engine_of(run).with_sentence_vector(run)
        if pooled is not run:
            self.runs.put(run.run_id, pooled)
        return pooled

    async def attribution(self, model: str | None, client: Client = ANYONE, **ask) -> dict:
        """Which tokens make an output what it is (Engine.attribution's `ask`), checked at once (its text,
        its cost), then computed in slices at turns of the gate."""
        engine = await self.engine_for(model, client)
        bound = self.max_attribution_step_tokens
        checked = engine.attribution(**ask, max_step_tokens=bound)
        slices = in_float32(
            engine.loaded, checked, lambda float32: engine.attribution(**ask, max_step_tokens=bound, model=float32)
        )
        what = (
            f"Integrated Gradients of {ask['steps']} steps"
            if ask["method"] == "integrated_gradients"
            else "gradient × input"
        )
        tokens = await self._tokens(engine, ask["text"], ask.get("other"))
        nbytes = engine.backward_bytes(steps_per_slice(tokens), tokens) + upcast_bytes(engine.loaded)
        return await self.in_turns(what, slices, client, nbytes, on=engine)

    async def _tokens(self, engine: Engine, *texts: str | None) -> int:
        """The most tokens any of the texts reads (at most the engine's max_tokens), tokenized in a thread."""
        lengths = [await asyncio.to_thread(engine.length, engine.spec(text)) for text in texts if text]
        return max(lengths, default=1)

    async def patch(self, model: str | None, client: Client = ANYONE, **ask) -> dict:
        """Input A with activations of input B put in (app.engine.patches.patch_job's `ask`): checked at once
        (its texts, its cells, its cost), then one padded pass of several cells per turn of the gate."""
        engine = await self.engine_for(model, client)
        bound = self.max_patch_tokens
        checked = patches.patch_job(engine, **ask, max_cell_tokens=bound)
        on_copy = lambda float32: patches.patch_job(engine, **ask, max_cell_tokens=bound, model=float32)  # noqa: E731
        slices = in_float32(engine.loaded, checked, on_copy)
        tokens = await self._tokens(engine, ask["text"], ask["source"])
        nbytes = engine.transient_bytes(BATCH_TOKENS // tokens + 2, tokens) + engine.run_bytes(tokens)
        nbytes += upcast_bytes(engine.loaded)
        return await self.in_turns(f"patching of {len(checked) - 1} passes", slices, client, nbytes, on=engine)

    async def scoreboard(
        self, model: str | None, client: Client = ANYONE, *, text: str, query: int | None, other: str | None
    ) -> dict:
        """The faithfulness scoreboard of a text (app.engine.faithfulness): checked at once (its query, its
        target, its cost), then its run, the run's weights, norm and ALTI as any view gets them, and the
        gradient and removal passes, one padded pass per turn of the gate."""
        engine = await self.engine_for(model, client)
        spec = engine.spec(text)
        faithfulness.check(engine, spec, query, other, self.max_patch_tokens)
        run = await self.submit(spec, client)
        accounts = {measure: await self.measured(run, measure, None, client) for measure in ("weights", "norm", "alti")}
        checked = faithfulness.scoreboard_slices(engine, run, accounts, query, other)

        def on_copy(float32: PreTrainedModel) -> Iterator[Callable[[], object]]:
            made: dict = {}
            copy = replace(engine.loaded, model=float32)
            yield lambda: made.update(run=Engine(copy, engine.max_chars, engine.max_tokens).run(spec))
            yield from faithfulness.scoreboard_slices(engine, run, accounts, query, other, (float32, made["run"]))

        slices = in_float32(engine.loaded, checked, on_copy)
        tokens = len(run.tokens)
        nbytes = engine.backward_bytes(1, tokens) + engine.transient_bytes(BATCH_TOKENS // tokens + 1, tokens)
        if upcast_bytes(engine.loaded):  # the copy and its run of the text
            nbytes += upcast_bytes(engine.loaded) + engine.run_bytes(tokens)
        what = f"the scoreboard of run {run.run_id} in {len(checked) - 2} passes"
        return await self.in_turns(what, slices, client, nbytes, on=engine)

    async def start_atlas(self, spec: AtlasSpec, client: Client = ANYONE) -> None:
        """The atlas's spec checked (its corpus, and its ablation sample's cost in its model) and put in the
        shared store: its id names it on every worker."""
        check_atlas(spec)
        check_ablation(await self.engine_for(spec.model, client), spec, self.max_ablation_tokens)
        await self._stored(spec)

    async def atlas_spec(self, atlas_id: str) -> AtlasSpec:
        """An atlas's spec by id, of a model this lab serves with the same weights."""
        spec = await asyncio.to_thread(self.specs.get, atlas_id) if RUN_ID.fullmatch(atlas_id) else None
        if not isinstance(spec, AtlasSpec):
            raise AtlasNotFound(atlas_id)
        engine = self.models.loaded(spec.model)
        if spec.model not in self.models.names or (engine is not None and spec.model_digest != engine.loaded.digest):
            raise ForeignRun(atlas_id, spec, self.loaded)
        return spec

    async def atlas_progress(self, atlas_id: str) -> dict:
        """How far the corpus run of the atlas is, on this worker or (through the shared store) another:
        its passes done and to do, or whether this worker keeps it."""
        if self.runs.get(f"atlas/{atlas_id}") is not None:
            return {"state": "done"}
        said = self._atlas_progress.get(atlas_id) or await asyncio.to_thread(self.specs.progress, atlas_id)
        if said is None:
            return {"state": "not running", "done": 0, "total": 0}
        return {"state": "running", "done": said[0], "total": said[1]}

    async def atlas(self, spec: AtlasSpec, client: Client = ANYONE) -> Atlas:
        """The atlas of a spec: kept, or computed once however many ask at a time, one padded pass per turn of
        the gate (app.engine.atlas); called off at its next pass once nobody waits for it."""
        key = f"atlas/{spec.run_id}"
        kept = self.runs.get(key)
        if kept is not None:
            return kept
        return await self._once(key, lambda: self._computed_atlas(key, spec, client))

    async def _computed_atlas(self, key: str, spec: AtlasSpec, client: Client) -> Atlas:
        engine = await self.engine_for(spec.model, client)
        if spec.model_digest != engine.loaded.digest:
            raise ForeignRun(spec.run_id, spec, engine.loaded)
        self._atlas_progress[spec.run_id] = (0, 0)
        said = 0.0  # when the shared store was last told: at most every PROGRESS_EVERY seconds
        # A run called off leaves its slice under way to finish in the model's thread, after the run has
        # said it is over: that slice must not say it is running again.
        over, saying = False, threading.Lock()

        def report(done: int, total: int) -> None:  # in the thread of the pass just done
            nonlocal said
            with saying:
                if over:
                    return
                self._atlas_progress[spec.run_id] = (done, total)
                if time.monotonic() - said >= PROGRESS_EVERY:
                    said = time.monotonic()
                    self._tell_store(spec.run_id, done, total)

        def end() -> None:
            nonlocal over
            with saying:
                over = True
                del self._atlas_progress[spec.run_id]
                self._tell_store(spec.run_id, -1, -1)

        try:
            slices = atlas_slices(engine, spec, report, self.max_ablation_tokens)
            found = await self.in_turns(
                f"the atlas {spec.run_id}", slices, client, atlas_bytes(engine, spec), on=engine
            )
        finally:
            await asyncio.to_thread(end)
        self.runs.put(key, found, counted=False)
        return found

    def _tell_store(self, run_id: str, done: int, total: int) -> None:
        """Progress for the other workers: a store that does not answer costs them the figure, not the run."""
        try:
            self.specs.put_progress(run_id, done, total)
        except StoreError as error:
            log.warning("progress of %s not shared: %s", run_id, error)

    async def head_space(
        self, spec: AtlasSpec, layer: int, head: int, projection: Projection, client: Client = ANYONE
    ) -> dict:
        """One head's queries and keys over the atlas's first sentences in one 2-D space: read at turns of the
        gate (atlas.space_slices), projected in a thread outside them (t-SNE takes seconds and no model),
        computed once however many ask at a time, and kept beside the runs."""
        key = f"atlas/{spec.run_id}/space/{layer}/{head}/{projection.method}/{projection.perplexity}/{projection.seed}"
        kept = self.runs.get(key)
        if kept is not None:
            return kept.points
        engine = await self.engine_for(spec.model, client)
        what = f"the queries and keys of head ({layer}, {head}) of atlas {spec.run_id}"

        async def compute() -> dict:
            read = await self.in_turns(what, space_slices(engine, spec, layer, head, projection.max_tokens), client)
            q, k = read.pop("q"), read.pop("k")
            return {**read, **await asyncio.to_thread(project, q, k, projection)}

        points = await self._once(key, compute)
        self.runs.put(key, Space(points), counted=False)
        return points

    def close(self) -> None:
        self.model_threads.close()

    async def store_problem(self) -> str | None:
        """Why the shared spec store is not answering, or None if it is."""
        try:
            await asyncio.to_thread(self.specs.ping)
        except StoreError as error:
            return str(error)
        return None

    async def _computed(self, spec: RunSpec, client: Client) -> Run:
        """The kept run, or the one pass under way for it, or a new pass: a turn at the gate, then a thread."""
        run = self.kept(spec)
        if run is not None:
            return run
        run_id = spec.run_id
        underway = self._passes.get(run_id)
        if underway is None:
            underway = self._passes[run_id] = asyncio.create_task(self._pass(spec, client))
        self._waiters[run_id] = self._waiters.get(run_id, 0) + 1
        try:
            # A client that goes away cancels its wait, not the pass the others are waiting for.
            return await asyncio.shield(underway)
        except asyncio.CancelledError:
            if self._waiters[run_id] == 1 and run_id not in self._started:
                # Nobody waits for it and it has not begun: its turn at the gate is given up, and a request
                # for the same run from now on starts a pass of its own.
                underway.cancel()
                del self._passes[run_id]
            raise
        finally:
            self._waiters[run_id] -= 1
            if not self._waiters[run_id]:
                del self._waiters[run_id]

    async def _pass(self, spec: RunSpec, client: Client) -> Run:
        """This spec's turn at the gate, or its place in another request's pass: a request that gets its
        turn takes the runs of the same model waiting behind it (in the gate's fair order) into its pass. The
        pass's memory (Engine.pass_bytes) is taken from the budget before its turn; the runs that join it
        take theirs then, where it is free at once (else they wait for a turn of their own)."""
        try:
            engine = await self.engine_for(spec.model, client)  # loaded before the turn, in case it was let go
            length = self._length(engine, spec)
            what = f"the pass of {length:,} tokens"
            async with self.taking(engine.pass_bytes([length]), client, what, on=engine):
                async with self.gate.admit(client, job=spec, short=length <= SHORT_PASS_TOKENS) as claimed:
                    self._started.add(spec.run_id)
                    if claimed is not None:
                        return await claimed
                    await self._arrivals()
                    joins = self._joins(spec, length, client)
                    try:
                        others = self.gate.claim(joins, self.max_batch_runs - 1)
                        self._started.update(job.run_id for job, _ in others)
                        outcomes = await self.model_threads.run(self.analyze_batch, [spec, *(job for job, _ in others)])
                    finally:
                        joins.give_back()
                    for (_, answer), outcome in zip(others, outcomes[1:], strict=True):
                        if answer.done():  # its request went away meanwhile
                            continue
                        if isinstance(outcome, Exception):
                            answer.set_exception(outcome)
                        else:
                            answer.set_result(outcome)
                    if isinstance(outcomes[0], Exception):
                        raise outcomes[0]
                    return outcomes[0]
        finally:
            self._started.discard(spec.run_id)
            if self._passes.get(spec.run_id) is asyncio.current_task():
                del self._passes[spec.run_id]

    async def _arrivals(self) -> None:
        """Lets the requests that came in with this one reach the gate before its pass takes those waiting:
        the event loop runs what it has ready, one round at a time, until QUIET_ROUNDS rounds in a row bring
        nobody new to the gate (or a pass's worth waits). A class pressing Enter at once arrives while the
        first request is on its way to the model: its pass ran alone, slowed by the HTTP work of the others'
        arrival (a one-prompt pass took 30-60 ms there), and the other 47 waited for it. A lone request loses a
        few rounds of an idle loop: microseconds."""
        quiet, rounds = 0, 0
        while quiet < QUIET_ROUNDS and rounds < MAX_ARRIVAL_ROUNDS and self.gate.waiting < self.max_batch_runs - 1:
            waiting = self.gate.waiting
            await asyncio.sleep(0)
            quiet = quiet + 1 if self.gate.waiting == waiting else 0
            rounds += 1

    def _length(self, engine: Engine, spec: RunSpec) -> int:
        """The spec's tokens as read, or more: every token reads at least one byte of its text, beside the few
        the tokenizer adds, so a short text's bytes bound them without tokenizing; a longer one is tokenized
        (Engine.read_ahead, which keeps the tokens for its pass) here, on the event loop, so that the request
        keeps its place in the gate's order."""
        prompt = engine.loaded.pipeline.prompts[spec.prompt] if spec.prompt is not None else ""
        bound = sum(len(text.encode()) for text in (spec.text, spec.text_pair or "", prompt)) + ADDED_TOKENS
        if bound <= SHORT_TOKENS:
            return min(bound, engine.max_tokens)
        return engine.read_ahead(spec)

    def _joins(self, spec: RunSpec, length: int, client: Client) -> "Joins":
        """Which waiting specs may join this one's turn: of the same model, each of at most a quarter of the
        model's positions, while all of them padded to the longest fit in one pass of the engine
        (BATCH_TOKENS) and the memory the larger pass takes is free at once, on the host and on the model's GPU
        (Joins.taken, given back by Joins.give_back). A longer input takes its turn alone, so it neither pads
        short ones nor waits behind them. A full turn of short prompts takes about twice a 512-token analyze
        (340 against 157 ms for MiniLM here), and a class's 48 prompts take two turns instead of four: a burst
        379 against 476 ms (servers alternating), since each pass beside the HTTP work of the learners answered
        before it runs at about half speed."""
        engine = self.models.loaded(spec.model)
        budgets = [self.budget, *filter(None, [self.device_budget(engine)])]
        return Joins(engine, spec, engine.pass_bytes([length]), budgets, client)

    def analyze(self, spec: RunSpec) -> Run:
        """The kept run of the spec, or one forward pass of it, kept, with its sentence vector (its pooling's
        own pass where due, Engine.pooling_pass): a whole run, for callers outside the server."""
        (outcome,) = self.analyze_batch([spec])
        if isinstance(outcome, Exception):
            raise outcome
        return self._with_sentence_vector(outcome)

    def analyze_batch(self, specs: list[RunSpec]) -> list[Run | Exception]:
        """The kept runs of specs of one model, and the others computed together (Engine.run_batch), kept."""
        outcomes: list[Run | Exception | None] = [self.kept(spec) for spec in specs]
        missing = [index for index, outcome in enumerate(outcomes) if outcome is None]
        if missing:
            computed = self.models.loaded(specs[missing[0]].model).run_batch([specs[index] for index in missing])
            for index, outcome in zip(missing, computed, strict=True):
                outcomes[index] = outcome
                if not isinstance(outcome, Exception):
                    self.runs.put(specs[index].run_id, outcome)
            trim_if_over(self.runs.max_bytes + self.blocks.max_bytes + RUNTIME_BYTES + self.models.loaded_bytes)
        return outcomes
