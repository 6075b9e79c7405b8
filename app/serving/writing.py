"""Serving writings (app.engine.writing): a decoder continues a prompt token by token at turns of the gate, each
step streamed as it comes to every client following the writing.

A writing is named by its spec (app.engine.spec.WritingSpec): the same spec writes the same tokens on any worker, so
its hash is the writing id, kept in the spec store for a follower on another worker. On this worker, requests for a
writing under way follow that one writing (Writings.follow): each gets the steps written so far, then each new one,
every step once and in order. The writing runs as one piece of work (app.serving.work): its memory (Writing.nbytes:
its cache of keys and values for every token it may read, its first pass, its funnels and the rows it keeps) taken
from the budget before its first pass, its steps taken while nobody else waits for the model; it is called off at
its next step once the last of its followers has left. A writing that ended is kept as its stream sent it (Kept) in
the lab's run cache, its bytes counted and let go as runs' are: a follower who comes after the end (a class's 30
phones) reads it at once, its bytes held in the budget while they are sent (as a request holds the run it reads:
once however many read it); where it was let go, or on another worker, it is written again from its spec, the same
tokens.

An address writes at most as many writings at once as it may have requests waiting for the model (a writing waits
at the gate for its turns), and a browser as many as it may: past that it is refused at once (429),
before any pass, never in the middle of a writing."""

import asyncio
import base64
import logging
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

from torch import Tensor

from app.engine.engine import Engine
from app.engine.errors import InvalidInput, OutOfRange
from app.engine.spec import WritingSpec
from app.engine.writing import Knobs, Step, Writing, rows_bytes, writing
from app.serving.gate import ANYONE, Client, TooManyWaiting
from app.serving.lab import ForeignRun, Lab, RunNotFound
from app.serving.work import Work
from app.settings import ENV_PREFIX

log = logging.getLogger("uvicorn.error")  # uvicorn shows its INFO lines
# A writing's turn at the model goes on, step after step, while nobody else waits for it, for at most this long:
# a turn of the gate costs two hops between threads a token (as a training's slice, app.engine.training.trainer).
ALONE_SECONDS = 0.25


class WritingNotFound(RunNotFound):
    def __str__(self) -> str:
        return f"writing {self.args[0]} is not kept any more (or never was): write again"


@dataclass(eq=False)
class Live:
    """A writing under way on this worker, and the steps it has written, for every client following it."""

    spec: WritingSpec
    engine: Engine
    writer: Writing
    client: Client  # whose writing it is: the client that started it
    # Its spec put in the shared store while the first step is written: a follower elsewhere learns the id from the
    # events after it.
    stored: asyncio.Future
    steps: list[dict] = field(default_factory=list)  # each as the API shows it (shown_step), once for all
    over: bool = False
    error: Exception | None = None
    followers: int = 0
    called_off: bool = False  # the last follower left: the model's thread writes no step after the one under way
    nbytes: int = 0  # the steps' bytes as kept (sized)
    task: asyncio.Task | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def said(self) -> None:
        """Wakes every follower: a step came, or the writing is over."""
        self.changed.set()
        self.changed = asyncio.Event()

    def told(self, step: dict) -> None:
        """A step written, on the event loop."""
        self.steps.append(step)
        self.said()


@dataclass(eq=False)
class Kept:
    """A writing that ended, as its stream sent it: its head, every step (funnel, rows and cache figures) and its
    end, kept in the lab's run cache (under kept_key) beside the runs, bounded in bytes only (it is not a run), its
    bytes those of the objects its steps are (sized)."""

    head: dict
    steps: list[dict]
    end: dict
    nbytes: int
    storages: dict[int, int] = field(init=False)  # as RunCache counts its entries' bytes: one of its own

    def __post_init__(self):
        self.storages = {id(self): self.nbytes}

    async def events(self) -> AsyncIterator[tuple]:
        yield "writing", self.head
        for step in self.steps:
            yield "step", step
        yield "done", self.end


def kept_key(writing_id: str) -> str:
    """A kept writing's key in the run cache: no run id (nor path segment of a run's route) is one."""
    return f"{writing_id}/written"


def sized(value) -> int:
    """The bytes a step as the API shows it holds in Python (dicts, lists, strings, numbers), each object counted
    (sys.getsizeof) however many steps share it: its rows' base64 are most of it."""
    total = sys.getsizeof(value)
    if isinstance(value, dict):
        total += sum(sized(key) + sized(item) for key, item in value.items())
    elif isinstance(value, list):
        total += sum(sized(item) for item in value)
    return total


class Writings:
    def __init__(self, lab: Lab, max_new_tokens: int):
        self.lab = lab
        self.max_new_tokens = max_new_tokens  # the most new tokens a writing may ask for (the lab's setting)
        self._live: dict[str, Live] = {}  # writings under way on this worker, by id
        self._by_client: Counter[Client] = Counter()  # writings under way started by each client
        self._by_address: Counter[str] = Counter()

    async def spec(self, model: str | None, text: str, knobs: Knobs, client: Client = ANYONE) -> WritingSpec:
        """The spec of a writing asked for: the model (loaded if it is not) and its weights' digest, the prompt
        and the knobs; new tokens past the lab's bound are refused (422, naming the setting)."""
        if knobs.max_new_tokens > self.max_new_tokens:
            raise InvalidInput(
                f"max_new_tokens is {knobs.max_new_tokens}: this lab writes at most {self.max_new_tokens} new tokens "
                f"a request ({ENV_PREFIX}MAX_NEW_TOKENS)"
            )
        engine = await self.lab.engine_for(model, client)
        temperature = None if knobs.temperature is None else float(knobs.temperature)
        top_p = None if knobs.top_p is None else float(knobs.top_p)
        return WritingSpec(
            engine.loaded.name,
            engine.loaded.digest,
            text,
            knobs.max_new_tokens,
            knobs.do_sample,
            temperature,
            knobs.top_k,
            top_p,
            knobs.seed,
        )

    async def stored(self, writing_id: str) -> WritingSpec:
        """A writing's spec by id, of a model this lab serves with the same weights."""
        return await self.lab.stored_spec(writing_id, WritingSpec, WritingNotFound)

    async def written(self, spec: WritingSpec, client: Client = ANYONE) -> dict:
        """The whole writing in one answer, once it has ended: its head, its steps and its end (follow's events
        put together); a writing that failed raises its error."""
        answer: dict = {"steps": []}
        async with self.follow(spec, client, raising=True) as events:
            async for name, data in events:
                if name == "step":
                    answer["steps"].append(data)
                else:
                    answer.update(data)
        return answer

    async def step_at(self, spec: WritingSpec, index: int, client: Client = ANYONE) -> tuple[dict, str, list[int]]:
        """Step `index` of a writing (as the API shows it), the words it continues (the prompt and the tokens
        written before it) and their ids: read from the writing as this worker keeps it, or from the one under way
        (waiting for that step), so that a class's question reads the steps its teacher's writing showed and
        nothing is written again. Only where it was let go (or never written here) is it written again from its
        spec, up to that step alone: a writing draws its tokens in order, so a shorter one writes the same first
        tokens (its last step says it stopped there)."""
        if index >= spec.max_new_tokens:
            most = spec.max_new_tokens
            raise OutOfRange(f"this writing writes {most} tokens at most: its steps are 0 to {most - 1}")
        if self.lab.runs.get(kept_key(spec.run_id)) is None and spec.run_id not in self._live:
            spec = replace(spec, max_new_tokens=index + 1)
        head, steps = {}, []
        async with self.follow(spec, client, raising=True) as events:
            async for name, data in events:
                if name == "writing":
                    head = data
                elif name == "step":
                    steps.append(data)
                    if len(steps) > index:
                        break
        if len(steps) <= index:
            raise OutOfRange(f"this writing ends after {len(steps)} tokens: the model wrote its end-of-text token")
        ids = [token["id"] for token in head["prompt"]] + [step["token"] for step in steps[:index]]
        return steps[index], spec.text + (steps[index - 1]["written"] if index else ""), ids

    async def at_temperature(
        self, spec: WritingSpec, words: str, ids: list[int], temperature: float, client: Client = ANYONE
    ) -> dict:
        """The temperature stage of the funnel of the token after `words` (read as `ids`): one token written from
        them at `temperature`, nothing else on (transformers' own TemperatureLogitsWarper on the same logits).
        Refused where `words` read as other tokens than `ids` (a decoded text is not always tokenized back alike)."""
        one = WritingSpec(spec.model, spec.model_digest, words, 1, True, float(temperature), 0, 1.0, 0)
        answer = await self.written(one, client)
        if [token["id"] for token in answer["prompt"]] != ids:
            raise InvalidInput("the words so far read as other tokens when read again: ask at another step")
        return next(stage for stage in answer["steps"][0]["funnel"] if stage["name"] == "temperature")

    @asynccontextmanager
    async def follow(
        self, spec: WritingSpec, client: Client = ANYONE, raising: bool = False
    ) -> AsyncIterator[AsyncIterator[tuple]]:
        """The writing of a spec as events, ("writing", its head) first, then ("step", step) for each token
        written, and ("done", its end) last, or ("error", {"detail"}) where it failed (its error raised instead
        where `raising`): the one kept once it ended (Kept, read at once: nothing is written; its bytes held in the
        budget until the follower leaves, as a request holds the run it reads), the one under way on this worker, or
        a new one started. Entering waits for its first step: a refusal (the model does not write, a
        knob or the prompt out of bounds, the lab busy) is raised here, before anything is sent. Leaving, the last
        follower calls the writing off at its next step."""
        key = kept_key(spec.run_id)
        kept = self.lab.runs.get(key)
        if kept is not None:
            holding = self.lab.budget.holding(kept.nbytes, client, f"reading the writing {spec.run_id}", key)
            del kept  # not held by this follower while it waits for its memory
            async with holding:  # its bytes held while they are sent, should the cache let them go meanwhile
                kept = self.lab.runs.get(key)
                if kept is not None:
                    yield kept.events()
            if kept is not None:
                return
        live = self._live.get(spec.run_id)
        if live is None:
            live = await self._started(spec, client)
        live.followers += 1
        try:
            while not live.steps and not live.over:
                await live.changed.wait()
            await live.stored  # its spec in the shared store before its id goes out (StoreError: 503)
            if not live.steps and live.error is not None:
                raise live.error
            yield self._events(live, raising)
        finally:
            live.followers -= 1
            if not live.followers and live.task is not None and not live.task.done():
                live.called_off = True
                live.task.cancel()
                if self._live.get(spec.run_id) is live:
                    del self._live[spec.run_id]  # a request from now on starts the writing anew

    async def _started(self, spec: WritingSpec, client: Client) -> Live:
        """A new writing of the spec, checked (Writing's checks, the client's bound) and started as a piece of
        work, its spec put in the shared store meanwhile for followers on other workers."""
        engine = await self.lab.engine_for(spec.model, client)
        if spec.model_digest != engine.loaded.digest:
            raise ForeignRun(spec.run_id, spec, engine.loaded)
        self._check_bound(client)
        knobs = Knobs(spec.max_new_tokens, spec.do_sample, spec.temperature, spec.top_k, spec.top_p, spec.seed)
        # The prompt tokenized, the knobs checked and generate's processors built off the event loop.
        writer = await asyncio.to_thread(writing, engine, spec.text, knobs, self.max_new_tokens)
        live = self._live.get(spec.run_id)  # another request may have started it meanwhile
        if live is not None:
            return live
        self._check_bound(client)
        log.info("writing %s: %d new tokens at most, from its spec", spec.run_id, spec.max_new_tokens)
        stored = asyncio.ensure_future(self.lab.store(spec))
        live = self._live[spec.run_id] = Live(spec, engine, writer, client, stored)
        self._by_client[client] += 1
        self._by_address[client.address] += 1
        live.task = asyncio.ensure_future(self._write(live))
        live.task.add_done_callback(lambda _: self._ended(live))
        return live

    def _check_bound(self, client: Client) -> None:
        """TooManyWaiting (429) for a client or an address already writing as many as it may wait for turns."""
        gate = self.lab.gate
        if self._by_client[client] >= gate.max_waiting_per_client:
            raise TooManyWaiting(
                f"you already have {gate.max_waiting_per_client} writings under way "
                f"({ENV_PREFIX}MAX_WAITING_PER_CLIENT): wait for one to end, then try again",
                2,
            )
        if self._by_address[client.address] >= gate.max_waiting_per_address:
            raise TooManyWaiting(
                f"this address already has {gate.max_waiting_per_address} writings under way "
                f"({ENV_PREFIX}MAX_WAITING_PER_ADDRESS): wait for one to end, then try again",
                2,
            )

    async def _write(self, live: Live) -> None:
        """The writing's steps on the model's thread at a turn of the gate, one after another while nobody else
        waits for the model (ALONE_SECONDS at most), each shown there as it is written and told to the followers
        at once: the thread does not wait for the event loop between two tokens, and the loop sends a step while
        the next one is written. Its memory: the writing's, and its rows again as the steps show them (base64, 4/3
        of their bytes). Once it has ended it is kept (Kept), its steps sized on the model's thread as they are
        shown."""
        writer, engine, gate = live.writer, live.engine, self.lab.gate
        loop = asyncio.get_running_loop()

        def steps_while_alone() -> None:
            began = time.monotonic()
            while True:
                shown = shown_step(engine, writer.step(), writer.new_ids)
                loop.call_soon_threadsafe(live.told, shown)
                live.nbytes += sized(shown)  # read once the writing has ended
                alone = not gate.waiting and not live.called_off and time.monotonic() - began < ALONE_SECONDS
                if writer.done or not alone:
                    return

        slices = (steps_while_alone for _ in writer.slices())
        shown = rows_bytes(engine, len(writer.prompt), writer.knobs.max_new_tokens) * 4 // 3
        work = Work(f"the writing {live.spec.run_id}", slices, writer.nbytes + shown, on=engine)
        try:
            await self.lab.works.run(work, live.client)
            # the steps told from the thread came into the loop before the end of their slice did
            self.lab.runs.put(kept_key(live.spec.run_id), Kept(head(live), live.steps, end(live), live.nbytes), False)
        except asyncio.CancelledError:
            written, most = len(writer.steps), writer.knobs.max_new_tokens
            log.info("the writing %s wrote %d of its %d tokens at most: called off", live.spec.run_id, written, most)
            raise
        except Exception as error:  # the followers are told; the writing is over
            live.error = error
        finally:
            live.over = True
            live.said()

    def _ended(self, live: Live) -> None:
        if self._live.get(live.spec.run_id) is live:
            del self._live[live.spec.run_id]
        self._by_client[live.client] -= 1
        if not self._by_client[live.client]:
            del self._by_client[live.client]
        self._by_address[live.client.address] -= 1
        if not self._by_address[live.client.address]:
            del self._by_address[live.client.address]

    async def _events(self, live: Live, raising: bool) -> AsyncIterator[tuple]:
        yield "writing", head(live)
        sent = 0
        while True:
            changed = live.changed
            while sent < len(live.steps):
                yield "step", live.steps[sent]
                sent += 1
            if live.over:
                break
            await changed.wait()
        if live.error is not None and raising:
            raise live.error
        if live.error is not None:
            yield "error", {"detail": str(live.error)}
        else:
            yield "done", end(live)


def head(live: Live) -> dict:
    """What a writing is, before its steps: its id, model and prompt, and the knobs as generate uses them."""
    writer, config = live.writer, live.engine.loaded.model.config
    return {
        "writing_id": live.spec.run_id,
        "model": live.spec.model,
        "text": live.spec.text,
        "prompt": [{"id": token.id, "text": token.text} for token in writer.prompt],
        "max_new_tokens": live.spec.max_new_tokens,
        "seed": live.spec.seed,
        "settings": writer.settings,
        "layers": config.num_hidden_layers,
        "heads": config.num_attention_heads,
    }


def end(live: Live) -> dict:
    """How a writing ended: its new tokens' ids and texts, and why it stopped."""
    ids = live.writer.new_ids
    return {
        "ids": ids,
        "tokens": [step["text"] for step in live.steps],
        "written": live.engine.loaded.tokenizer.decode(ids),
        "stop": live.steps[-1]["stop"],
    }


def shown_step(engine: Engine, step: Step, written: list[int]) -> dict:
    """A step as the API shows it: every token named by its text (Engine.pieces), the new tokens so far decoded
    together (`written`: their ids, this step's last), the attention rows in float32 (float32_rows)."""
    ids = sorted({token for stage in step.funnel for token in stage.ids} | set(step.draw.ids) | {step.token})
    texts = dict(zip(ids, engine.pieces(ids), strict=True))
    return {
        "index": step.index,
        "position": step.position,
        "token": step.token,
        "text": step.text,
        "written": engine.loaded.tokenizer.decode(written),
        "read": step.read,
        "reused": step.reused,
        "funnel": [
            {
                "name": stage.name,
                "ids": stage.ids,
                "tokens": [texts[token] for token in stage.ids],
                "probabilities": stage.probabilities,
                "kept": stage.kept,
                "mass": stage.mass,
            }
            for stage in step.funnel
        ],
        "draw": {
            "how": step.draw.how,
            "token": step.draw.token,
            "ids": step.draw.ids,
            "tokens": [texts[token] for token in step.draw.ids],
            "probabilities": step.draw.probabilities,
            "waits": step.draw.waits,
            "arrivals": step.draw.arrivals,
        },
        "attention": float32_rows(step.attention),
        "cache": [
            {"first": block.first, "tokens": block.tokens, "shape": list(block.shape), "bytes": block.nbytes}
            for block in step.cache
        ],
        "cache_bytes": step.cache_bytes,
        "stop": step.stop,
    }


def float32_rows(rows: Tensor) -> dict:
    """The attention rows, [layer, head, key], as their float32 bytes in base64 (as an analyze answer embeds its
    matrices): a step's rows over a long prompt are thousands of numbers, which as JSON numbers took the server and
    each client longer to write and read than the step took to compute."""
    data = rows.contiguous().numpy().astype("<f4", copy=False).tobytes()
    return {"shape": list(rows.shape), "dtype": "float32", "data": base64.b64encode(data).decode()}
