"""The models one lab serves, by name: the default one loaded at start, the others read once at start (their
shape, for the page and the API: nothing a page view or GET /api/model asks for loads a model again), then
loaded when a run needs them, at most a few at a time (the least recently used one beyond the default is let
go; its runs are recomputed from their specs if it is needed again). A load takes turns of the lab's own, a
step at a time (app.engine.model.load_steps), and one address may cause at most a few an hour (Loads).

Models grown in the lab (app.engine.training) are served too: every checkpoint folder in the data folder's
models/ (grown-<digest>), found when listed or asked for by name, so that every worker and replica sharing the
data folder serves the same ones. They are small (a few hundred KB to a few MB): a slider over a training's
checkpoints loads one after another, so they are kept loaded apart from the others (up to MAX_GROWN_LOADED, the
least recently used let go) and their loads count against no address's loads an hour."""

import asyncio
import json
import os
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from app.engine.blocks import BlockCache
from app.engine.choices import Placement
from app.engine.encoder_decoder import EncoderDecoderEngine, make_engine
from app.engine.engine import Engine
from app.engine.errors import InvalidInput
from app.engine.hub import is_hub_id
from app.engine.model import (
    AUTO,
    LoadedModel,
    ModelLoadError,
    ModelTooLarge,
    Step,
    load_model,
    load_steps,
    locate,
    read_model_config,
    read_sentence_pipeline,
)
from app.engine.runs import BLOCK_BYTES
from app.engine.training.model import GROWN_ABOUT, is_grown
from app.serving.gate import TooManyWaiting

HOUR = 3600.0
MAX_GROWN_LOADED = 32  # grown checkpoints kept loaded at once in a worker, apart from max_loaded


class UnknownModel(InvalidInput):
    pass


class UnreadableModel(InvalidInput):
    """A listed model that the lab could not load (a family without an adapter is probed then): the lab
    starts all the same, and asking for that model answers with its one line."""


class TooManyLoads(TooManyWaiting):
    """This address has caused as many model loads as it may in an hour (429); others are unaffected."""


class Loads:
    """At most `per_hour` model loads an hour per client address, in this process."""

    def __init__(self, per_hour: int, clock: Callable[[], float] = time.monotonic):
        self.per_hour = per_hour
        self.clock = clock
        self._times: dict[str, deque[float]] = {}

    def take(self, address: str) -> None:
        now = self.clock()
        for key in list(self._times):  # loads are rare: forgetting the hour's old ones costs nothing
            times = self._times[key]
            while times and times[0] <= now - HOUR:
                times.popleft()
            if not times:
                del self._times[key]
        times = self._times.setdefault(address, deque())
        if len(times) >= self.per_hour:
            wait = int(times[0] + HOUR - now) + 1
            raise TooManyLoads(
                f"this address has had {self.per_hour} models loaded in the last hour; this lab keeps the "
                f"models in use loaded: try again in {wait // 60 + 1} min, or use a model already loaded",
                wait,
            )
        times.append(now)


class Models:
    def __init__(
        self,
        default: LoadedModel,
        folders: list[str | Path],
        max_chars: int,
        max_tokens: int | None,
        max_loaded: int,
        blocks: BlockCache | None = None,
        placement: Placement = AUTO,
        grown: Path | None = None,
    ):
        """`folders`: more models, each a folder or a Hub id (app.engine.model.locate), read in `placement`'s
        dtype and device where it does not choose its own (`?dtype=…`). `blocks`: where every engine's runs
        keep the blocks of weights they compute, one cache for all (Run.weights). `grown`: the folder of the
        models grown in the lab (the data folder's models/), served beside these."""
        self.grown = grown
        self.default = default.name
        # every engine's input limits and block cache (Engine)
        self.limits = (max_chars, max_tokens, BlockCache(BLOCK_BYTES) if blocks is None else blocks)
        self.max_loaded = max_loaded
        self.folders: dict[str, Path] = {default.name: default.path}
        self.placement = placement
        self.references: dict[str, str | Path] = {}  # what each model beside the default was listed as
        for folder in folders:
            name, path = locate(folder)
            if name in self.folders:
                raise ModelLoadError(
                    f"two models are named {name!r} (a model is named by its folder or id): rename one"
                )
            # A bad folder stops the lab at start, not a learner's request.
            read_model_config(path / read_sentence_pipeline(path).transformer)
            self.folders[name] = path
            self.references[name] = folder
        self._engines: OrderedDict[str, Engine | EncoderDecoderEngine] = OrderedDict(
            {default.name: make_engine(default, *self.limits)}
        )
        # Each model's shape (Engine.info), read once here: a model is loaded for its runs, never for a view. One
        # that cannot be loaded (its probe fails) leaves the lab starting, and says why when asked for.
        self.infos = {default.name: self._engines[default.name].info}
        self.unreadable: dict[str, str] = {}
        for name in self.folders:
            if name not in self.infos:
                try:
                    loaded = load_model(self.references[name], name, placement)
                    self.infos[name] = make_engine(loaded, *self.limits).info
                except ModelTooLarge:
                    raise  # the lab's settings cannot serve it: they are changed, not a learner told
                except ModelLoadError as error:
                    self.unreadable[name] = str(error)
        self._loading: dict[str, asyncio.Lock] = {}

    @property
    def names(self) -> list[str]:
        """The listed models, the default first, then the grown ones, oldest first."""
        return [*(name for name in self.folders if not is_grown(name)), *self.grown_names()]

    def grown_names(self) -> list[str]:
        """The checkpoints in the grown models' folder now, oldest first (a training's in the order it kept them)."""
        if self.grown is None or not self.grown.is_dir():
            return []
        found = [
            (entry.stat().st_mtime_ns, entry.name)
            for entry in os.scandir(self.grown)
            if is_grown(entry.name) and entry.is_dir()
        ]
        return [name for _, name in sorted(found)]

    def known(self, name: str | None) -> str:
        """The model's name (the default for None), if this lab serves it and could read it."""
        name = name or self.default
        if name not in self.folders and self.grown is not None and is_grown(name):
            if (self.grown / name / "config.json").is_file():
                self.folders[name] = self.grown / name
                self.references[name] = str(self.grown / name)
        if name not in self.folders:
            listed = ", ".join(name for name in self.folders if not is_grown(name))
            grown = f" and {len(self.grown_names())} grown ones (/api/models)" if self.grown_names() else ""
            # A Hub id a lesson plan names is served by adding it: said, as nothing downloads at run time.
            serve = (
                f"; to serve it, download it beforehand (`hf download {name}`) and start the lab with "
                f"ATTENTION_LAB_MODELS={name}"
                if is_hub_id(name)
                else ""
            )
            raise UnknownModel(f"no model {name!r} here: this lab serves {listed}{grown}{serve}")
        if name in self.unreadable:
            raise UnreadableModel(self.unreadable[name])
        return name

    def info(self, name: str | None) -> dict:
        """A model's shape and family, loaded or not (a grown model is read the first time: it is small)."""
        name = self.known(name)
        if name not in self.infos:
            try:
                engine = self._engines.get(name)
                loaded = engine.loaded if engine is not None else load_model(self.references[name], name)
            except ModelLoadError as error:
                raise UnreadableModel(str(error)) from error
            self.infos[name] = make_engine(loaded, *self.limits).info
        return self.infos[name]

    def grown_about(self, name: str) -> dict | None:
        """The training and step a grown model came from (its folder's grown.json), None for another model."""
        if not is_grown(name) or self.grown is None:
            return None
        try:
            return json.loads((self.grown / name / GROWN_ABOUT).read_text())
        except (OSError, ValueError):
            return None

    def loaded(self, name: str) -> Engine | None:
        return self._engines.get(name)

    @property
    def loaded_bytes(self) -> int:
        """The weights of the models loaded besides the default one (which the runtime's share counts)."""
        return sum(engine.weights_bytes for name, engine in self._engines.items() if name != self.default)

    @property
    def held_bytes(self) -> int:
        """The weights of every model loaded: the lab's memory budget counts them beside its runs and work
        (app.serving.memory.Pinned), so a model of today's size leaves its runs the rest of the budget. A model is
        let go when more than max_loaded_models are asked for, not for a computation's room: a pass under way may
        be using it."""
        return sum(engine.weights_bytes for engine in self._engines.values())

    async def engine(self, name: str | None, load: Callable[[str, Iterator[Step]], Awaitable[Engine]]) -> Engine:
        """The engine of a model by name (the default for None); one not loaded is loaded by `load`, which runs
        the steps of its load (app.engine.model.load_steps, the last making the engine) one after another: the
        lab at turns of its own, on the model's thread."""
        name = self.known(name)
        engine = self._engines.get(name)
        if engine is None:
            async with self._loading.setdefault(name, asyncio.Lock()):
                engine = self._engines.get(name)
                if engine is None:
                    steps = load_steps(
                        self.references[name],
                        name,
                        then=lambda loaded: make_engine(loaded, *self.limits),
                        placement=self.placement,
                    )
                    try:
                        engine = self._engines[name] = await load(name, steps)
                    except ModelLoadError as error:
                        raise UnreadableModel(str(error)) from error
        self._engines.move_to_end(name)
        for grown, most in ((False, self.max_loaded), (True, MAX_GROWN_LOADED)):
            kind = [other for other in self._engines if is_grown(other) == grown]
            for oldest in [other for other in kind if other not in (self.default, name)][: max(0, len(kind) - most)]:
                del self._engines[oldest]
        return engine
