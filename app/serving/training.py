"""Serving trainings (app.engine.training): a model grown in the lab, one training at a time per lab, as a piece of
work (app.serving.work) whose slices are whole steps at turns of the gate, its memory (weights, gradients, AdamW's
moments, activations) taken from the budget before it starts. It runs detached from the request that started it
(a page that closes leaves it running), and everything about it lives in the data folder, where every worker and
replica sharing the folder reads it:

    data/trainings/<train_id>/state.json     its spec, state, owner, curves and checkpoints (at each checkpoint)
    data/trainings/<train_id>/progress.json  its step and loss, every PROGRESS_SECONDS while it runs
    data/trainings/<train_id>/resume.pt      what resumes it exactly (weights, AdamW's moments, step)
    data/trainings/<train_id>/control        "pause" or "cancel", asked for by any worker, read between slices
    data/trainings/active.json               the one training under way: its id, and its worker's heartbeat
    data/models/grown-<digest>/              its checkpoints: models the lab serves (app.serving.models)

States: running, paused, stopped (the server stopped, or its worker went away: resumable from its last saved state),
cancelled, done, failed. A paused, stopped or cancelled training holds no place: starting it again (or resume)
goes on from where it was saved, with the numbers an uninterrupted run has."""

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from app.engine.training.checks import UNBOUNDED, check, vocab_size
from app.engine.training.spec import TRAIN_ID, Bounds, TrainingSpec
from app.engine.training.trainer import Trainer, training_bytes
from app.serving.gate import Busy, Client, Stopping, TooManyWaiting
from app.serving.lab import Lab
from app.serving.work import Work

log = logging.getLogger("uvicorn.error")
STATES = ("running", "paused", "stopped", "cancelled", "done", "failed")
OVER = ("done", "cancelled", "failed")  # a stream of the training ends at these
BEAT_SECONDS = 2.0  # how often the worker running the training says so in active.json
STALE_SECONDS = 20.0  # a heartbeat older than this: its worker is gone, and the place is free
PROGRESS_SECONDS = 0.25  # how often progress.json is written while it runs, and how often streams look
HEARTBEAT_SECONDS = 15.0  # a stream with nothing to say sends a comment this often
WAIT_SECONDS = 3.0  # a pause or cancel waits this long for the training's worker to have done it


class TrainingNotFound(LookupError):
    def __str__(self) -> str:
        return f"there is no training {self.args[0]} in this lab: start one with POST /api/train"


class TrainingUnderWay(RuntimeError):
    """The lab grows one model at a time (409)."""


class NotYourTraining(PermissionError):
    def __str__(self) -> str:
        return (
            "only the browser that started this training, or its class's teacher (X-Class-Secret), can pause, "
            "resume or cancel it"
        )


class TeacherOnly(PermissionError):
    def __str__(self) -> str:
        return (
            "a class is running on this lab: only its teacher starts a training (with the class's code and its "
            "X-Class-Secret)"
        )


class TooManyTrainingStreams(TooManyWaiting):
    """This browser or address follows too many trainings at once (429)."""


@dataclass(frozen=True)
class Owner:
    """Who may pause, resume and cancel a training: the browser that started it (a digest of its address and its
    lab_client cookie) and, for a training started in a class, that class's teacher."""

    browser: str
    class_code: str | None = None


def browser_of(client: Client) -> str:
    return hashlib.sha256(f"{client.address}\0{client.cookie}".encode()).hexdigest()[:32]


class Folder:
    """One training's files under data/trainings/<train_id>, each written whole (beside, then renamed)."""

    def __init__(self, root: Path, train_id: str):
        self.train_id = train_id
        self.root = root / train_id

    def read(self, name: str) -> dict | None:
        try:
            return json.loads((self.root / name).read_text())
        except (OSError, ValueError):
            return None

    def write(self, name: str, content: dict) -> None:
        write_whole(self.root / name, json.dumps(content, separators=(",", ":")).encode())

    def mtime(self, name: str) -> int:
        try:
            return (self.root / name).stat().st_mtime_ns
        except OSError:
            return 0

    def resumed(self) -> dict | None:
        path = self.root / "resume.pt"
        return torch.load(path, weights_only=True) if path.is_file() else None

    def save_resume(self, trainer: Trainer) -> None:
        path = self.root / "resume.pt"
        self.root.mkdir(parents=True, exist_ok=True)
        writing = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(trainer.state(), writing)
        os.replace(writing, path)

    def wanted(self) -> str | None:
        """A pause or a cancel asked for, by a request on any worker."""
        try:
            return (self.root / "control").read_text().strip() or None
        except OSError:
            return None

    def ask(self, what: str | None) -> None:
        if what is None:
            with contextlib.suppress(OSError):
                (self.root / "control").unlink()
        else:
            write_whole(self.root / "control", what.encode())


def write_whole(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    writing = path.with_name(f".{path.name}.{os.getpid()}.{id(content)}")
    writing.write_bytes(content)
    os.replace(writing, path)


class Place:
    """The lab's one place for a training under way, in the data folder (active.json), so that every worker and
    replica sharing it sees it: taken by creating the file, kept by a heartbeat, free once removed or stale."""

    def __init__(self, root: Path):
        self.path = root / "active.json"
        self.me = f"{socket.gethostname()}:{os.getpid()}"

    def holder(self) -> dict | None:
        """The training holding the place, if its worker still beats."""
        try:
            held = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return held if time.time() - held.get("beat", 0) < STALE_SECONDS else None

    def take(self, train_id: str) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() and self.holder() is None:
            # a stale place: moved aside (of several workers doing so at once, one moves it), then taken anew
            aside = self.path.with_name(f".stale.{self.me}.{time.time_ns()}")
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
                os.unlink(aside)
        try:
            descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as file:
            json.dump({"train_id": train_id, "worker": self.me, "beat": time.time()}, file)
        return True

    def beat(self, train_id: str) -> None:
        write_whole(self.path, json.dumps({"train_id": train_id, "worker": self.me, "beat": time.time()}).encode())

    def give_back(self, train_id: str) -> None:
        held = self.holder()
        if held is not None and held["train_id"] == train_id and held["worker"] == self.me:
            with contextlib.suppress(OSError):
                self.path.unlink()


class Trainings:
    """The lab's trainings: started, run in slices at turns of the gate, paused, resumed, called off and followed."""

    def __init__(
        self,
        lab: Lab,
        data_dir: Path,
        bounds: Bounds = UNBOUNDED,
        streams_per_browser: int = 6,
        streams_per_address: int = 600,
    ):
        self.lab = lab
        self.root = data_dir / "trainings"
        self.models_dir = data_dir / "models"
        self.bounds = bounds
        self.place = Place(self.root)
        self.streams_per_browser, self.streams_per_address = streams_per_browser, streams_per_address
        self._streams: Counter[str] = Counter()
        self._task: asyncio.Task | None = None  # the training this worker runs
        self._cached: dict[str, tuple[int, dict]] = {}  # train_id -> (state.json's mtime, its content)

    def folder(self, train_id: str) -> Folder:
        if not TRAIN_ID.fullmatch(train_id):
            raise TrainingNotFound(train_id)
        return Folder(self.root, train_id)

    # Starting, and going on

    def check(self, spec: TrainingSpec) -> int:
        """The spec checked against what can be grown and the lab's bounds (InvalidInput, 422); its weights."""
        return check(spec, self.bounds)

    async def start(self, spec: TrainingSpec, owner: Owner) -> dict:
        """The training of the spec started (or gone on with, from its last saved state) if it is not done, in
        the lab's one place for a training: its status."""
        weights = self.check(spec)
        folder = Folder(self.root, spec.train_id)
        state = await asyncio.to_thread(folder.read, "state.json")
        if state is not None and state["state"] == "done":
            return await self.status(spec.train_id)
        held = await asyncio.to_thread(self.place.holder)
        if held is not None and held["train_id"] == spec.train_id:
            return await self.status(spec.train_id)
        return await self._go(spec, folder, owner, weights, state)

    async def resume(self, train_id: str, owner: Owner | None = None) -> dict:
        """A paused, stopped or cancelled training gone on with from its last saved state."""
        folder = self.folder(train_id)
        state = await self._state(folder)
        if state["state"] in ("done", "running"):
            return await self.status(train_id)
        spec = TrainingSpec.from_canonical(json.dumps({"training": state["spec"]}))
        return await self._go(spec, folder, owner or Owner(**state["owner"]), state["weights"], state)

    async def _go(self, spec: TrainingSpec, folder: Folder, owner: Owner, weights: int, state: dict | None) -> dict:
        if not await asyncio.to_thread(self.place.take, spec.train_id):
            held = await asyncio.to_thread(self.place.holder)
            under_way = held["train_id"] if held else "another"
            progress = await asyncio.to_thread(Folder(self.root, under_way).read, "progress.json") if held else None
            at = f" (step {progress['step']:,} of {progress['steps']:,})" if progress else ""
            raise TrainingUnderWay(
                f"this lab grows one model at a time, and training {under_way}{at} is under way: wait for it, "
                "or pause or cancel it first"
            )
        try:
            trainer = await self._trainer(spec, folder)
            record = record_of(trainer, owner, weights, state["started"] if state else time.time())
            await asyncio.to_thread(save_state, folder, record)
            await asyncio.to_thread(folder.ask, None)
        except BaseException:
            await asyncio.to_thread(self.place.give_back, spec.train_id)
            raise
        self._task = asyncio.create_task(self._run(spec, folder, trainer, record))
        return await self.status(spec.train_id)

    async def _trainer(self, spec: TrainingSpec, folder: Folder) -> Trainer:
        """The training's trainer, at its last saved state where it has one: its data read and tokenized (a BPE
        learnt from its text) on a worker thread, outside the gate (no model runs meanwhile). A text that gives
        too few tokens is refused here, before the training is said to start."""

        def made() -> Trainer:
            trainer = Trainer(spec, self.models_dir, folder.resumed())
            trainer.data.check()
            return trainer

        return await self.lab.works.on_thread(
            f"the data of training {spec.train_id}", 4 * len(spec.text.encode()) + 2**20, made
        )

    async def _run(self, spec: TrainingSpec, folder: Folder, trainer: Trainer, record: dict) -> None:
        """The training, a slice per turn of the gate, as the lab's own client (its own address in the gate's
        round, so that each learner's request waits for one slice at most), until it is done or asked to pause
        or cancel, or the server stops; its state saved whichever way it ends."""
        client = Client(f"training {spec.train_id}")
        beat = asyncio.create_task(self._beat(spec.train_id))
        ended, error = "stopped", None
        what = f"the training {spec.train_id}"
        try:
            while not trainer.done:
                wanted = None
                work = Work(what, self._slices(folder, trainer, record), record["memory_bytes"])
                try:
                    async with contextlib.aclosing(self.lab.works.stream(work, client)) as slices:
                        async for _ in slices:
                            wanted = await asyncio.to_thread(folder.wanted)
                            if wanted:
                                break
                except Stopping:
                    break
                except Busy as busy:  # the lab is full for now: the training waits its turn again
                    await asyncio.sleep(busy.retry_after)
                    continue
                if wanted:
                    ended = {"pause": "paused", "cancel": "cancelled"}.get(wanted, "paused")
                    break
            else:
                ended = "done"
        except asyncio.CancelledError:
            ended = "stopped"
        except Exception as failure:
            log.exception("training %s failed", spec.train_id)
            ended, error = "failed", f"{type(failure).__name__}: {failure}"
        finally:
            beat.cancel()
            record.update(state=ended, error=error, record=trainer.record())
            await asyncio.shield(asyncio.to_thread(self._ended, folder, trainer, record))
            log.info("training %s %s at step %d of %d", spec.train_id, ended, trainer.step, spec.steps)

    def _slices(self, folder: Folder, trainer: Trainer, record: dict) -> Iterator[Callable[[], dict]]:
        """The trainer's slices, each followed (on the model's thread) by its progress written for every worker,
        and, where it kept a checkpoint, the training's state and what resumes it."""
        said = 0.0
        gate = self.lab.gate
        for piece in trainer.slices(waited_for=lambda: gate.waiting > 0):

            def run(piece=piece) -> dict:
                nonlocal said
                kept = len(trainer.checkpoints)
                progress = piece()
                if len(trainer.checkpoints) > kept:
                    folder.save_resume(trainer)
                    record["record"] = trainer.record()
                    save_state(folder, record)
                if time.monotonic() - said >= PROGRESS_SECONDS or trainer.done:
                    said = time.monotonic()
                    folder.write("progress.json", {**progress, "state": "running", "at": time.time()})
                return progress

            yield run

    def _ended(self, folder: Folder, trainer: Trainer, record: dict) -> None:
        save_ended(folder, trainer, record)
        folder.ask(None)
        self.place.give_back(folder.train_id)

    async def _beat(self, train_id: str) -> None:
        while True:
            await asyncio.to_thread(self.place.beat, train_id)
            await asyncio.sleep(BEAT_SECONDS)

    # Asking it to stop

    async def pause(self, train_id: str) -> dict:
        return await self._ask(train_id, "pause", "paused")

    async def cancel(self, train_id: str) -> dict:
        return await self._ask(train_id, "cancel", "cancelled")

    async def _ask(self, train_id: str, what: str, becomes: str) -> dict:
        """A pause or cancel asked of the training's worker (any worker's), waited for WAIT_SECONDS; a training
        that is not running is paused or cancelled here."""
        folder = self.folder(train_id)
        state = await self._state(folder)
        if state["state"] in ("done", "failed") or state["state"] == becomes:
            return await self.status(train_id)
        if not await self._live(train_id):
            if becomes == "cancelled":
                state["state"] = "cancelled"
                await asyncio.to_thread(save_state, folder, state)
            return await self.status(train_id)
        await asyncio.to_thread(folder.ask, what)
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline and await self._live(train_id):
            await asyncio.sleep(0.05)
        return await self.status(train_id)

    async def _live(self, train_id: str) -> bool:
        held = await asyncio.to_thread(self.place.holder)
        return held is not None and held["train_id"] == train_id

    async def close(self) -> None:
        """The server is stopping: the training under way here ends at its next slice (the gate says Stopping),
        saves its state and gives its place back."""
        if self._task is not None and not self._task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._task)  # its failure is in its state already

    # Reading it

    async def _state(self, folder: Folder) -> dict:
        mtime = await asyncio.to_thread(folder.mtime, "state.json")
        cached = self._cached.get(folder.train_id)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        state = await asyncio.to_thread(folder.read, "state.json")
        if state is None:
            raise TrainingNotFound(folder.train_id)
        self._cached[folder.train_id] = (mtime, state)
        if len(self._cached) > 64:
            self._cached.pop(next(iter(self._cached)))
        return state

    async def status(self, train_id: str) -> dict:
        """The training's state, spec, curves, checkpoints and head scores, from its folder; a training marked
        running whose worker no longer beats is "stopped" (resumable from its last saved state)."""
        folder = self.folder(train_id)
        state = await self._state(folder)
        progress = await asyncio.to_thread(folder.read, "progress.json")
        return described(state, progress, await self._live(train_id))

    async def active(self) -> str | None:
        held = await asyncio.to_thread(self.place.holder)
        return held["train_id"] if held else None

    async def listed(self, limit: int = 50) -> list[dict]:
        """The lab's trainings, the latest first: id, state, step, steps and when each started."""

        def read() -> list[dict]:
            if not self.root.is_dir():
                return []
            found = []
            for entry in os.scandir(self.root):
                if TRAIN_ID.fullmatch(entry.name):
                    state = Folder(self.root, entry.name).read("state.json")
                    if state is not None:
                        found.append(state)
            found.sort(key=lambda state: state["started"], reverse=True)
            return found[:limit]

        live = await self.active()
        return [
            {
                "train_id": state["train_id"],
                "state": state_now(state["state"], live == state["train_id"]),
                "step": state["record"]["step"],
                "steps": state["record"]["steps"],
                "started": state["started"],
                "class_code": state["owner"]["class_code"],
            }
            for state in await asyncio.to_thread(read)
        ]

    async def owner(self, train_id: str) -> Owner:
        state = await self._state(self.folder(train_id))
        return Owner(**state["owner"])

    @contextlib.asynccontextmanager
    async def follow(self, train_id: str, client: Client) -> AsyncIterator[AsyncIterator]:
        """The training's events while it lasts: its whole status first, then "progress" (step, loss) every
        PROGRESS_SECONDS while it runs, "checkpoint" for each checkpoint kept (with its head scores), "state"
        when its state changes, and "end" once it is done, cancelled or failed. Refused (429) past the streams a
        browser or an address may hold; an unknown training is 404 before the stream opens."""
        first = await self.status(train_id)
        browser, address = f"browser {browser_of(client)}", f"address {client.address}"
        if self._streams[browser] >= self.streams_per_browser or self._streams[address] >= self.streams_per_address:
            raise TooManyTrainingStreams("this browser or address already follows too many trainings: close one", 5)
        self._streams.update((browser, address))
        try:
            yield self._events(train_id, first)
        finally:
            self._streams.subtract((browser, address))
            self._streams += Counter()  # drops the keys at zero

    async def _events(self, train_id: str, status: dict) -> AsyncIterator:
        folder = self.folder(train_id)
        yield ("training", status)
        said = {
            "state": status["state"],
            "checkpoints": len(status["checkpoints"]),
            "progress": folder.mtime("progress.json"),
        }
        quiet_since = time.monotonic()
        while status["state"] not in OVER:
            await asyncio.sleep(PROGRESS_SECONDS)
            status = await self.status(train_id)
            events = []
            for checkpoint in status["checkpoints"][said["checkpoints"] :]:
                events.append(("checkpoint", checkpoint))
            said["checkpoints"] = len(status["checkpoints"])
            progress_at = await asyncio.to_thread(folder.mtime, "progress.json")
            if progress_at != said["progress"]:
                said["progress"] = progress_at
                events.append(("progress", progress_of(status)))
            if status["state"] != said["state"]:
                said["state"] = status["state"]
                events.append(("state", {**progress_of(status), "phase_change": status["phase_change"]}))
            for event in events:
                yield event
            if events:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= HEARTBEAT_SECONDS:
                quiet_since = time.monotonic()
                yield None
        yield ("end", progress_of(status))


def record_of(trainer: Trainer, owner: Owner, weights: int, started: float, state: str = "running") -> dict:
    """What state.json says of a training: its spec, state, owner, bounds' figures and the trainer's record."""
    spec = trainer.spec
    return {
        "train_id": spec.train_id,
        "spec": json.loads(spec.canonical())["training"],
        "state": state,
        "owner": {"browser": owner.browser, "class_code": owner.class_code},
        "started": started,
        "weights": weights,
        "memory_bytes": training_bytes(spec, vocab_size(spec)),
        "error": None,
        "record": trainer.record(),
    }


def save_state(folder: Folder, record: dict) -> None:
    folder.write("state.json", {**record, "updated": time.time()})


def save_ended(folder: Folder, trainer: Trainer, record: dict) -> None:
    """The training's files as its worker leaves them when it ends in `record`'s state: what resumes it (unless it
    failed), its state and its last progress. A lab reading the folder later (a worker restarted on it, another
    replica) answers it from these and goes on from them."""
    if record["state"] != "failed":
        folder.save_resume(trainer)
    save_state(folder, record)
    folder.write("progress.json", {**trainer.progress(), "state": record["state"], "at": time.time()})


def state_now(state: str, live: bool) -> str:
    """A state as it is now: one marked running whose worker no longer beats was stopped."""
    return "stopped" if state == "running" and not live else state


def progress_of(status: dict) -> dict:
    keys = ("train_id", "state", "step", "steps", "loss", "seconds", "model")
    return {key: status[key] for key in keys}


def described(state: dict, progress: dict | None, live: bool) -> dict:
    """A training's status for the API, from its state.json and progress.json."""
    record = state["record"]
    checkpoints = record["checkpoints"]
    now = state_now(state["state"], live)
    fresher = progress is not None and progress["step"] > record["step"] and now == "running"
    return {
        "train_id": state["train_id"],
        "state": now,
        "spec": state["spec"],
        "class_code": state["owner"]["class_code"],
        "started": state["started"],
        "step": progress["step"] if fresher else record["step"],
        "steps": record["steps"],
        "loss": progress["loss"] if fresher else record["loss"],
        "seconds": progress["seconds"] if fresher else record["seconds"],
        "weights": state["weights"],
        "memory_bytes": state["memory_bytes"],
        "checkpoint_bytes": sum(checkpoint["bytes"] for checkpoint in checkpoints),
        "losses": record["losses"],
        "checkpoints": checkpoints,
        "phase_change": record["phase_change"],
        "model": checkpoints[-1]["model"] if checkpoints else None,
        "error": state["error"],
    }
