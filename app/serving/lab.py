"""Serving runs and their measures: each worker keeps recent runs, computes one pass per run however many ask for it
at a time (and a class's runs together, in padded passes), and recomputes from the shared spec store any run it
does not hold. The numbers come from the engine (app.engine.engine); every computation runs as a piece of work
(app.serving.work): its memory taken before it starts, at turns of the gate, in slices.

A measure's block is a bounded slice of work (norm and ALTI rollout one slice per block, app.engine.measures), a
model's load its weights, then its digest 128 MB at a time (app.engine.model.load_steps): between two slices the
model goes to whoever's turn it is, so a learner's analyze waits for one slice at most. A measure's blocks are
computed once however many ask for them at a time, and kept in the run cache beside the runs (by run id, measure
and block), within its bound in bytes. The lab's other computations have rooms of their own beside this one:
the head atlas (app.serving.atlas), the experiments (app.serving.experiments) and search (app.serving.search)."""

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor

from app.engine import cells, measures
from app.engine.blocks import BlockCache
from app.engine.capture import MADE_WEIGHTS_BYTES
from app.engine.choices import Placement
from app.engine.encoder_decoder import EncoderDecoderEngine, EncoderDecoderRun, kept_bytes, run_bytes, slices
from app.engine.engine import BATCH_TOKENS, Engine
from app.engine.model import LoadedModel
from app.engine.runs import Run
from app.engine.spec import RUN_ID, EncoderDecoderSpec, RunSpec
from app.engine.training.model import is_grown
from app.serving.cache import RunCache
from app.serving.gate import ANYONE, Client, PassGate
from app.serving.memory import Budget
from app.serving.models import Loads, Models
from app.serving.spec_store import SpecStore, StoreError
from app.serving.work import Work, Works

# The model, torch and the server besides the runs: about 0.45 GB measured, with room for a pass in flight.
RUNTIME_BYTES = 1024**3
BLOCK_SHARE = 4  # the share of the cache's bytes kept for computed blocks of weights: a quarter
SHARED_PART = 4  # inputs of at most 1/SHARED_PART of the model's positions share turns
ADDED_TOKENS = 16  # tokens a tokenizer adds around a text or a pair, at most ([CLS], [SEP], <s>, a "▁")
SHORT_TOKENS = 256  # a text whose bytes bound its tokens below this many is not tokenized to state its pass
SHORT_PASS_TOKENS = 128  # a pass of at most this many tokens goes before heavy work's slices (PassGate.admit)

log = logging.getLogger("uvicorn.error")  # uvicorn shows its INFO lines


class RunNotFound(KeyError):
    def __str__(self) -> str:
        return f"run {self.args[0]} is not kept any more (or never was): analyze the text again"


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


class RoomForBlocks:
    """Which waiting views' blocks join a turn that computes blocks: up to MADE_WEIGHTS_BYTES in all. Each took
    its memory before it waited, so joining takes none."""

    def __init__(self, first: Blocks):
        self.room = MADE_WEIGHTS_BYTES - first.nbytes

    def __call__(self, job: object) -> bool:
        if not isinstance(job, Blocks) or job.nbytes > self.room:
            return False
        self.room -= job.nbytes
        return True

    def give_back(self) -> None:
        pass


class Joins:
    """Which waiting specs join a spec's pass, with the memory the joined pass takes beyond the first spec's."""

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
        more = self.engine.footprint.pass_bytes([padded_to] * (self.count + 1)) - self.own - self.taken
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
        model_loads_per_hour: int = 20,
        placement: Placement | None = None,
        max_device_bytes: int = 0,
        grown: Path | None = None,
    ):
        """`loaded`: the default model; `folders`: more models, loaded when first asked for, in `placement`'s
        dtype and device where they do not choose their own (by default: decided at load, their weights within
        max_cache_bytes). `max_device_bytes`: each GPU's memory for the work done there (0: its free memory,
        app.engine.placement.work_bytes). `grown`: the folder of the models grown in the lab (data/models)."""
        # One budget of memory for what is kept and the work under way (app.serving.memory.Budget): every
        # computation takes its bytes from it before it starts. What is kept is bounded within it too: a quarter
        # for computed blocks of weights (Run.weights, each N² floats a head), the rest for the runs and the
        # other measures' blocks; work under way lets the least recently used of them go where it needs room.
        budget = Budget(
            max_cache_bytes,
            gate.max_waiting,
            gate.max_wait_seconds,
            gate.max_waiting_per_client,
            gate.max_waiting_per_address,
        )
        self.blocks = BlockCache(max_cache_bytes // BLOCK_SHARE)
        placement = placement or Placement(host_budget_bytes=max_cache_bytes)
        self.models = Models(
            loaded, list(folders), max_chars, max_tokens, max_loaded_models, self.blocks, placement, grown
        )
        self.loads = Loads(model_loads_per_hour)
        self.specs = specs
        self.gate = gate
        self.runs: RunCache[Run] = RunCache(max_runs, max_cache_bytes - self.blocks.max_bytes)
        budget.caches = [self.blocks, self.runs]
        budget.pinned = [self.models]
        self.works = Works(gate, budget, specs, max_device_bytes, max_batch_runs, self.resident_bound)
        # Specs waiting to be put in the store, with what their requests await.
        self._to_store: list[tuple[RunSpec, asyncio.Future]] = []
        self._writers: set[asyncio.Task] = set()

    @property
    def budget(self) -> Budget:
        return self.works.budget

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

    def resident_bound(self) -> int:
        """The process's resident bytes past which freed memory goes back to the system (Works.trim): what the
        caches may keep, the runtime's share, and the models loaded besides the default."""
        return self.runs.max_bytes + self.blocks.max_bytes + RUNTIME_BYTES + self.models.loaded_bytes

    def spec(self, *args, **kwargs) -> RunSpec:
        """The checked spec of a request for the default model (app.engine.engine.Engine.spec)."""
        return self.engine.spec(*args, **kwargs)

    async def engine_for(self, model: str | None, client: Client = ANYONE) -> Engine:
        """A model's engine by name (the default for None), loaded if it is not: at a turn of the gate, and
        counted against the client's loads an hour (Loads)."""
        return await self.models.engine(model, lambda name, steps: self._load(name, steps, client))

    async def _load(self, name: str, steps: Iterator[Callable[[], Engine]], client: Client) -> Engine:
        if not is_grown(name):  # a grown checkpoint loads in a few ms: a slider over them is no flood of loads
            self.loads.take(client.address)
        return await self.works.run(Work(f"the load of {name}", steps), client)

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
        what = f"{len(window.rows)} × {len(window.cols)} cells of run {run.run_id}"
        nbytes = cells.window_bytes(plan, window, len(run.tokens))
        if plan.measure in cells.ROW_MEASURES and run.block_bytes > cells.ROWS_FROM_BYTES:
            if plan.measure != "weights":
                run.check_adapter()
            model = (await self.engine_for(run.spec.model, client)).loaded.model
            source = cells.row_source(run, model, plan.measure)
            slices = cells.window_slices(source, plan, window, len(run.tokens))
            return await self.works.run(Work(what, slices, nbytes), client)
        one = plan.layers[0] if len(plan.layers) == 1 else None
        blocks = await self.measured(run, plan.measure, one, client)
        source = cells.block_source(dict(zip(range(run.n_layers) if one is None else [one], blocks, strict=True)))
        slices = cells.window_slices(source, plan, window, len(run.tokens))
        return await self.works.on_thread(what, nbytes, lambda: [piece() for piece in slices][-1], client)

    async def _weights(self, run: Run, layers: list[int], client: Client) -> dict[int, Tensor]:
        """These blocks' weights, by block: kept, or computed at turns of the gate on the model's thread, as many
        blocks a turn as take at most MADE_WEIGHTS_BYTES (one a turn past it)."""
        found = {layer: kept for layer in layers if (kept := run.kept_weights(layer)) is not None}
        missing = [layer for layer in layers if layer not in found]
        per_turn = max(1, MADE_WEIGHTS_BYTES // run.block_bytes)
        for start in range(0, len(missing), per_turn):
            found.update(await self._computed_weights(Blocks(run, missing[start : start + per_turn]), client))
        return found

    async def _computed_weights(self, blocks: Blocks, client: Client) -> dict[int, Tensor]:
        """A view's blocks of weights computed at its turn of the gate, and with them those of the views
        waiting behind it (in the gate's fair order, up to MADE_WEIGHTS_BYTES in all), each of which took its
        memory before it waited: a class whose blocks went (the budget needed their room) asks for them all at
        once, and 48 learners' all-heads views took 288 turns of one small block each."""
        what = f"weights of {len(blocks.layers)} blocks of run {blocks.run.run_id}"
        joins = lambda: RoomForBlocks(blocks)  # noqa: E731
        return await self.works.batched(what, blocks, blocks.nbytes, compute_blocks, joins, client)

    async def _block(self, run: Run, measure: str, layer: int, client: Client) -> Tensor:
        key = f"{run.run_id}/{measure}/{layer}"
        kept = self.runs.get(key)
        if kept is not None:
            return kept.block
        return await self.works.once(key, lambda: self._computed_block(key, run, measure, layer, client))

    async def _computed_block(self, key: str, run: Run, measure: str, layer: int, client: Client) -> Tensor:
        what = f"{measure} of block {layer} of run {run.run_id}"
        if measure == "alti_rollout":  # R_l = C_l R_{l-1}: this block's ALTI and the rollout before it
            contributions = await self._block(run, "alti", layer, client)
            before = await self._block(run, "alti_rollout", layer - 1, client) if layer else None
            work = Work(what, [lambda: measures.rolled(contributions, before)], len(run.tokens) ** 2 * 4)
        else:
            model = (await self.engine_for(run.spec.model, client)).loaded.model
            slices = measures.block_slices(run, model, measure, layer)  # a model without an adapter refused here
            nbytes = measures.alti_bytes(run, layer) if measure == "alti" else measures.norm_bytes(run, layer)
            work = Work(what, slices, nbytes)
        block = await self.works.run(work, client)
        self.runs.put(key, Measured(block), counted=False)
        return block

    def engine_of(self, run: Run) -> Engine:
        """The engine that computed a run: loaded, since the run was just served (serve_spec, serve_run)."""
        return self.models.loaded(run.spec.model)

    def kept(self, spec: RunSpec) -> Run | None:
        """This worker's run of the spec, if it holds one: no forward pass needed."""
        return self.runs.get(spec.run_id)

    async def serve_spec(self, spec: RunSpec, client: Client = ANYONE) -> Run:
        """The run a request's spec asks for (POST /api/analyze and the like): kept, or computed once however many
        ask for it at a time, at a turn of the gate; its bytes held for the request that reads it (Budget.hold),
        then its spec in the shared store, so that every worker can serve the id the client receives. `client` is
        whose turn at the gate this request takes."""
        engine = await self.engine_for(spec.model, client)
        if self.kept(spec) is None:  # refused before its tokens are read (hold): a refusal costs a flood nothing
            self.budget.check_room(client)
            self.gate.check_room(client)
        await self.hold(engine, spec, client)
        run = await self._computed(spec, client)
        await self.store(spec)
        return run

    async def hold(self, engine: Engine, spec: RunSpec, client: Client) -> None:
        """The bytes of the spec's run held for the request that reads it (Budget.hold), before it is read."""
        length = self._length(engine, spec)
        what = f"reading a run of {length:,} tokens"
        await self.budget.hold(engine.footprint.run_bytes(length), client, what, spec.run_id)

    async def store(self, spec: RunSpec) -> None:
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

    async def stored_spec(self, run_id: str, kind: type[RunSpec], not_found: type[RunNotFound]) -> RunSpec:
        """A spec of this kind (a run's, an atlas's, an index's) by id from the shared store, of a model this lab
        serves with the same weights (where that model is loaded: else it is checked when it is)."""
        spec = await asyncio.to_thread(self.specs.get, run_id) if RUN_ID.fullmatch(run_id) else None
        if not isinstance(spec, kind):
            raise not_found(run_id)
        engine = self.models.loaded(spec.model)
        if spec.model not in self.models.names or (engine is not None and spec.model_digest != engine.loaded.digest):
            raise ForeignRun(run_id, spec, self.loaded)
        return spec

    async def serve_run(self, run_id: str, client: Client = ANYONE) -> Run:
        """The run a request names by id (GET /api/runs/{id}/…): from this worker's cache, or recomputed from the
        spec in the shared store at a turn of the gate; its bytes held for the request before it reads it
        (Budget.hold)."""
        kept = self.runs.get(run_id)
        held = isinstance(kept, Run)  # an encoder-decoder's run is kept under its id too, and is not one
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
            await self.hold(engine, spec, client)
        return await self._computed(spec, client)

    async def serve_pair(
        self, engine: EncoderDecoderEngine, spec: EncoderDecoderSpec, client: Client = ANYONE
    ) -> EncoderDecoderRun:
        """An encoder-decoder's run (POST /api/analyze, its export, a class's question on it), as serve_spec serves
        a one-text run: kept in the run cache (its bytes, both halves', counted there), or computed once however
        many ask for it at a time, in turns of the gate (the target written first where none is given), and kept;
        its bytes held for the request that reads it (Budget.hold)."""
        kept = self.runs.get(spec.run_id)
        if isinstance(kept, EncoderDecoderRun):
            nbytes = kept.nbytes
            del kept  # not held by this request while it waits for its memory
            await self.budget.hold(nbytes, client, f"reading run {spec.run_id}", spec.run_id)
            run = self.runs.get(spec.run_id)
            if run is not None:
                return run
        else:  # refused before its tokens are read: a refusal costs a flood nothing
            self.budget.check_room(client)
            self.gate.check_room(client)
            source, target = engine.source_length(spec.source), engine.target_length(spec)
            what = f"reading a run of {source:,} source and {target:,} target tokens"
            await self.budget.hold(kept_bytes(engine, source, target), client, what, spec.run_id)
        return await self.works.once(spec.run_id, lambda: self._pair_pass(engine, spec, client))

    async def _pair_pass(
        self, engine: EncoderDecoderEngine, spec: EncoderDecoderSpec, client: Client
    ) -> EncoderDecoderRun:
        source, target = engine.source_length(spec.source), engine.target_length(spec)
        log.info("encoder-decoder run %s: a pass from its spec", spec.run_id)
        what = f"the encoder-decoder run {spec.run_id}"
        run = await self.works.run(Work(what, slices(engine, spec), run_bytes(engine, source, target), engine), client)
        self.runs.put(spec.run_id, run)
        return run

    async def pooled(self, run: Run, client: Client = ANYONE) -> Run:
        """The run with its sentence vector: for an input longer than the model's pooling reads, the
        pooling's own pass (Engine.pooling_pass) at a turn of the gate, computed once however many ask for
        it at a time, and the run kept with it."""
        if not run.pooling_pass_due:
            return run

        async def pooling_pass() -> Run:
            engine = await self.engine_for(run.spec.model, client)  # loaded before the turn, in case it was let go
            what = f"the pooling pass of run {run.run_id}"
            work = Work(what, [lambda: self._with_sentence_vector(run)], engine.footprint.pooling_bytes(), on=engine)
            return await self.works.run(work, client)

        return await self.works.once(f"{run.run_id}/pooling", pooling_pass)

    def _with_sentence_vector(self, run: Run) -> Run:
        """Engine.with_sentence_vector, and the new run kept in the old one's place (its bytes counted)."""
        pooled = self.engine_of(run).with_sentence_vector(run)
        if pooled is not run:
            self.runs.put(run.run_id, pooled)
        return pooled

    def close(self) -> None:
        self.works.close()

    async def store_problem(self) -> str | None:
        """Why the shared spec store is not answering, or None if it is."""
        try:
            await asyncio.to_thread(self.specs.ping)
        except StoreError as error:
            return str(error)
        return None

    async def _computed(self, spec: RunSpec, client: Client) -> Run:
        """The kept run, or the one pass under way for it, or a new pass."""
        run = self.kept(spec)
        if run is not None:
            return run
        return await self.works.once(spec.run_id, lambda: self._pass(spec, client))

    async def _pass(self, spec: RunSpec, client: Client) -> Run:
        """This spec's turn at the gate, or its place in another request's pass: a request that gets its turn
        takes the runs of the same model waiting behind it (in the gate's fair order) into its pass. The pass's
        memory (Footprint.pass_bytes) is taken from the budget before its turn; the runs that join it take theirs
        then, where it is free at once (else they wait for a turn of their own)."""
        engine = await self.engine_for(spec.model, client)  # loaded before the turn, in case it was let go
        length = self._length(engine, spec)
        return await self.works.batched(
            f"the pass of {length:,} tokens",
            spec,
            engine.footprint.pass_bytes([length]),
            self.run_batch_sync,
            lambda: self._joins(spec, length, client),
            client,
            on=engine,
            short=length <= SHORT_PASS_TOKENS,
        )

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

    def _joins(self, spec: RunSpec, length: int, client: Client) -> Joins:
        """Which waiting specs may join this one's turn: of the same model, each of at most a quarter of the
        model's positions, while all of them padded to the longest fit in one pass of the engine
        (BATCH_TOKENS) and the memory the larger pass takes is free at once, on the host and on the model's GPU
        (Joins.taken, given back by Joins.give_back). A longer input takes its turn alone, so it neither pads
        short ones nor waits behind them."""
        engine = self.models.loaded(spec.model)
        return Joins(engine, spec, engine.footprint.pass_bytes([length]), self.works.budgets(engine), client)

    def run_sync(self, spec: RunSpec) -> Run:
        """The kept run of the spec, or one forward pass of it on the caller's thread, kept, with its sentence
        vector (its pooling's own pass where due, Engine.pooling_pass): a whole run, for callers outside the
        server (scripts, tests), with no turn of the gate and no memory asked for."""
        (outcome,) = self.run_batch_sync([spec])
        if isinstance(outcome, Exception):
            raise outcome
        return self._with_sentence_vector(outcome)

    def run_batch_sync(self, specs: list[RunSpec]) -> list[Run | Exception]:
        """The kept runs of specs of one model, and the others computed together (Engine.compute_batch), kept."""
        outcomes: list[Run | Exception | None] = [self.kept(spec) for spec in specs]
        missing = [index for index, outcome in enumerate(outcomes) if outcome is None]
        if missing:
            computed = self.models.loaded(specs[missing[0]].model).compute_batch([specs[index] for index in missing])
            for index, outcome in zip(missing, computed, strict=True):
                outcomes[index] = outcome
                if not isinstance(outcome, Exception):
                    self.runs.put(specs[index].run_id, outcome)
        return outcomes
