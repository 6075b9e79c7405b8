"""The models one lab serves, by name: the default one loaded at start, the others on first use, at most
a few at a time (the least recently used one beyond the default is let go; its runs are recomputed from
their specs if it is needed again)."""

import asyncio
from collections import OrderedDict
from pathlib import Path

from app.engine.model import LoadedModel, ModelLoadError, load_model, locate, read_model_config, read_sentence_pipeline
from app.engine.runs import Engine, InvalidInput


class UnknownModel(InvalidInput):
    pass


class UnreadableModel(InvalidInput):
    """A listed model that fails to load when first asked for (a family without an adapter is probed then)."""


class Models:
    def __init__(
        self,
        default: LoadedModel,
        folders: list[str | Path],
        max_chars: int,
        max_tokens: int | None,
        max_loaded: int,
    ):
        """`folders`: more models, each a folder or a Hub id (app.engine.model.locate)."""
        self.default = default.name
        self.limits = (max_chars, max_tokens)  # every engine's input limits (Engine)
        self.max_loaded = max_loaded
        self.folders: dict[str, Path] = {default.name: default.path}
        for folder in folders:
            name, path = locate(folder)
            if name in self.folders:
                raise ModelLoadError(
                    f"two models are named {name!r} (a model is named by its folder or id): rename one"
                )
            # A bad folder stops the lab at start, not a learner's request.
            read_model_config(path / read_sentence_pipeline(path).transformer)
            self.folders[name] = path
        self._engines: OrderedDict[str, Engine] = OrderedDict({default.name: Engine(default, *self.limits)})
        self._loading: dict[str, asyncio.Lock] = {}

    @property
    def names(self) -> list[str]:
        return list(self.folders)

    def loaded(self, name: str) -> Engine | None:
        return self._engines.get(name)

    @property
    def loaded_bytes(self) -> int:
        """The weights of the models loaded besides the default one (which the runtime's share counts)."""
        return sum(engine.loaded.nbytes for name, engine in self._engines.items() if name != self.default)

    async def engine(self, name: str | None) -> Engine:
        """The engine of a model by name (the default for None), loading it in a thread the first time."""
        name = name or self.default
        if name not in self.folders:
            raise UnknownModel(f"no model {name!r} here: this lab serves {', '.join(self.names)}")
        engine = self._engines.get(name)
        if engine is None:
            async with self._loading.setdefault(name, asyncio.Lock()):
                engine = self._engines.get(name)
                if engine is None:
                    try:
                        loaded = await asyncio.to_thread(load_model, self.folders[name], name)
                    except ModelLoadError as error:
                        raise UnreadableModel(str(error)) from error
                    engine = self._engines[name] = Engine(loaded, *self.limits)
        self._engines.move_to_end(name)
        while len(self._engines) > self.max_loaded:
            oldest = next(other for other in self._engines if other not in (self.default, name))
            del self._engines[oldest]
        return engine
