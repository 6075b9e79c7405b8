"""Serving the experiments that run the model again: Integrated Gradients and gradient × input
(app.engine.attribution), activation patching (app.engine.patch_job) and the faithfulness scoreboard
(app.engine.faithfulness). Each is checked at once (its texts, its cells, its cost against its bound), then
computed as a piece of work in slices at turns of the gate, on the model's own numbers in float32."""

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace

from transformers import PreTrainedModel

from app.engine import faithfulness
from app.engine.attribution import attribution_bytes, attribution_job
from app.engine.engine import Engine
from app.engine.model import in_float32
from app.engine.patch_job import patch_bytes, patch_job
from app.serving.gate import ANYONE, Client
from app.serving.lab import Lab
from app.serving.work import Work


class Experiments:
    def __init__(self, lab: Lab, max_attribution_step_tokens: int | None = None, max_patch_tokens: int | None = None):
        self.lab = lab
        self.max_attribution_step_tokens = max_attribution_step_tokens  # IG's steps × tokens in one request
        self.max_patch_tokens = max_patch_tokens  # patching's (cells + 2) × tokens, the scoreboard's alike

    async def attribution(self, model: str | None, client: Client = ANYONE, **ask) -> dict:
        """Which tokens make an output what it is (app.engine.attribution.attribution_job's `ask`), checked at
        once (its text, its cost), then computed in slices at turns of the gate."""
        engine = await self.lab.engine_for(model, client)
        bound = self.max_attribution_step_tokens
        checked = attribution_job(engine, **ask, max_step_tokens=bound)
        slices = in_float32(
            engine.loaded, checked, lambda float32: attribution_job(engine, **ask, max_step_tokens=bound, model=float32)
        )
        what = (
            f"Integrated Gradients of {ask['steps']} steps"
            if ask["method"] == "integrated_gradients"
            else "gradient × input"
        )
        tokens = await tokens_of(engine, ask["text"], ask.get("other"))
        return await self.lab.works.run(Work(what, slices, attribution_bytes(engine, tokens), engine), client)

    async def patch(self, model: str | None, client: Client = ANYONE, **ask) -> dict:
        """Input A with activations of input B put in (app.engine.patch_job.patch_job's `ask`): checked at once
        (its texts, its cells, its cost), then one padded pass of several cells per turn of the gate."""
        engine = await self.lab.engine_for(model, client)
        bound = self.max_patch_tokens
        checked = patch_job(engine, **ask, max_cell_tokens=bound)
        on_copy = lambda float32: patch_job(engine, **ask, max_cell_tokens=bound, model=float32)  # noqa: E731
        slices = in_float32(engine.loaded, checked, on_copy)
        tokens = await tokens_of(engine, ask["text"], ask["source"])
        what = f"patching of {len(checked) - 1} passes"
        return await self.lab.works.run(Work(what, slices, patch_bytes(engine, tokens), engine), client)

    async def scoreboard(
        self, model: str | None, client: Client = ANYONE, *, text: str, query: int | None, other: str | None
    ) -> dict:
        """The faithfulness scoreboard of a text (app.engine.faithfulness): checked at once (its query, its
        target, its cost), then its run, the run's weights, norm and ALTI as any view gets them, and the
        gradient and removal passes, one padded pass per turn of the gate."""
        engine = await self.lab.engine_for(model, client)
        spec = engine.spec(text)
        faithfulness.check(engine, spec, query, other, self.max_patch_tokens)
        run = await self.lab.serve_spec(spec, client)
        measured = self.lab.measured
        accounts = {measure: await measured(run, measure, None, client) for measure in ("weights", "norm", "alti")}
        checked = faithfulness.scoreboard_slices(engine, run, accounts, query, other)

        def on_copy(float32: PreTrainedModel) -> Iterator[Callable[[], object]]:
            made: dict = {}
            copy = replace(engine.loaded, model=float32)
            yield lambda: made.update(run=Engine(copy, engine.max_chars, engine.max_tokens).compute(spec))
            yield from faithfulness.scoreboard_slices(engine, run, accounts, query, other, (float32, made["run"]))

        slices = in_float32(engine.loaded, checked, on_copy)
        what = f"the scoreboard of run {run.run_id} in {len(checked) - 2} passes"
        nbytes = faithfulness.scoreboard_bytes(engine, len(run.tokens))
        return await self.lab.works.run(Work(what, slices, nbytes, engine), client)


async def tokens_of(engine: Engine, *texts: str | None) -> int:
    """The most tokens any of the texts reads (at most the engine's max_tokens), tokenized in a thread."""
    lengths = [await asyncio.to_thread(engine.length, engine.spec(text)) for text in texts if text]
    return max(lengths, default=1)
