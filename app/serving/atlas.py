"""Serving the head atlas (app.engine.atlas): a corpus run named by its spec, computed once however many ask for it
at a time, one padded pass per turn of the gate, with its progress shared through the spec store, called off at
its next pass once nobody waits for it; and one head's queries and keys projected in one space."""

from dataclasses import dataclass, field

from app.engine.atlas import (
    Atlas,
    Projection,
    atlas_bytes,
    atlas_slices,
    check_ablation,
    check_atlas,
    project,
    projection_bytes,
    space_slices,
)
from app.engine.spec import AtlasSpec
from app.serving.gate import ANYONE, Client
from app.serving.lab import ForeignRun, Lab, RunNotFound
from app.serving.work import Work


class AtlasNotFound(RunNotFound):
    def __str__(self) -> str:
        return f"atlas {self.args[0]} is not kept any more (or never was): start the corpus run again"


@dataclass
class Space:
    """A head's projected queries and keys, kept in the run cache (a few hundred KB, not counted)."""

    points: dict
    storages: dict[int, int] = field(default_factory=dict)


class Atlases:
    def __init__(self, lab: Lab, max_ablation_tokens: int | None = None):
        self.lab = lab
        self.max_ablation_tokens = max_ablation_tokens  # the ablation sample's tokens × heads × blocks, at most

    async def start(self, spec: AtlasSpec, client: Client = ANYONE) -> None:
        """The atlas's spec checked (its corpus, and its ablation sample's cost in its model) and put in the
        shared store: its id names it on every worker."""
        check_atlas(spec)
        check_ablation(await self.lab.engine_for(spec.model, client), spec, self.max_ablation_tokens)
        await self.lab.store(spec)

    async def spec(self, atlas_id: str) -> AtlasSpec:
        """An atlas's spec by id, of a model this lab serves with the same weights."""
        return await self.lab.stored_spec(atlas_id, AtlasSpec, AtlasNotFound)

    async def progress(self, atlas_id: str) -> dict:
        """How far the corpus run of the atlas is, on this worker or (through the shared store) another: its
        passes done and to do, or whether this worker keeps it. An unknown id is not found."""
        if self.lab.runs.get(f"atlas/{atlas_id}") is not None:
            return {"state": "done", "done": 0, "total": 0}
        said = await self.lab.works.progress_of(atlas_id)
        if said is None:
            await self.spec(atlas_id)
            return {"state": "not running", "done": 0, "total": 0}
        return {"state": "running", "done": said[0], "total": said[1]}

    async def atlas(self, spec: AtlasSpec, client: Client = ANYONE) -> Atlas:
        """The atlas of a spec: kept, or computed once however many ask at a time, one padded pass per turn of
        the gate (app.engine.atlas); called off at its next pass once nobody waits for it."""
        key = f"atlas/{spec.run_id}"
        kept = self.lab.runs.get(key)
        if kept is not None:
            return kept
        return await self.lab.works.once(key, lambda: self._computed(key, spec, client))

    async def _computed(self, key: str, spec: AtlasSpec, client: Client) -> Atlas:
        engine = await self.lab.engine_for(spec.model, client)
        if spec.model_digest != engine.loaded.digest:
            raise ForeignRun(spec.run_id, spec, engine.loaded)
        async with self.lab.works.progress(spec.run_id) as progress:
            slices = atlas_slices(engine, spec, progress, self.max_ablation_tokens)
            work = Work(f"the atlas {spec.run_id}", slices, atlas_bytes(engine, spec), on=engine)
            found = await self.lab.works.run(work, client)
        self.lab.runs.put(key, found, counted=False)
        return found

    async def head_space(
        self, spec: AtlasSpec, layer: int, head: int, projection: Projection, client: Client = ANYONE
    ) -> dict:
        """One head's queries and keys over the atlas's first sentences in one 2-D space: read at turns of the
        gate (atlas.space_slices), projected in a thread outside them (t-SNE takes seconds and no model),
        computed once however many ask at a time, and kept beside the runs."""
        key = f"atlas/{spec.run_id}/space/{layer}/{head}/{projection.method}/{projection.perplexity}/{projection.seed}"
        kept = self.lab.runs.get(key)
        if kept is not None:
            return kept.points
        engine = await self.lab.engine_for(spec.model, client)
        what = f"the queries and keys of head ({layer}, {head}) of atlas {spec.run_id}"

        async def compute() -> dict:
            slices = space_slices(engine, spec, layer, head, projection.max_tokens)
            read = await self.lab.works.run(Work(what, slices), client)
            q, k = read.pop("q"), read.pop("k")
            projected = await self.lab.works.on_thread(
                f"the {projection.method} map of {what}",
                projection_bytes(q, k),
                lambda: project(q, k, projection),
                client,
            )
            return {**read, **projected}

        points = await self.lab.works.once(key, compute)
        self.lab.runs.put(key, Space(points), counted=False)
        return points
