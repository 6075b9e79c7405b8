"""Builds the ASGI app: the model is loaded and the spec store opened once per server process, in the
lifespan, and shared by every request of that process."""

import asyncio
import gc
import io
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import State
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.classroom import routes as classroom
from app.classroom.backends import MemoryBackend, RedisBackend, StoreDown
from app.classroom.classes import Classes, not_shared
from app.classroom.errors import (
    BadChoice,
    ClassLimit,
    ClassModeOff,
    ClassNotFound,
    NotTheTeacher,
    NotYourLearner,
    UnknownLearner,
    ViewTooLarge,
    WrongPhase,
)
from app.classroom.store import ClassLimits
from app.classroom.streams import TooManyStreams, stop_on_signals
from app.engine.errors import InvalidInput, OutOfRange, PassFailed, TextTooLong
from app.engine.model import LoadedModel, ModelLoadError, load_model
from app.engine.rerank import CrossEncoder, load_cross_encoder
from app.engine.threads import one_core_elsewhere
from app.engine.training.spec import Bounds
from app.serving.atlas import Atlases
from app.serving.experiments import Experiments
from app.serving.gate import Busy, PassGate, TooManyWaiting
from app.serving.lab import Lab, RunNotFound
from app.serving.memory import check_memory, keep_freed_memory, reserve, reserve_size
from app.serving.search import Searches
from app.serving.server import check_protocol
from app.serving.spec_store import REDIS_SCHEMES, CorpusAllowance, SpecStore, StoreError, open_spec_store
from app.serving.training import NotYourTraining, TeacherOnly, TrainingNotFound, Trainings, TrainingUnderWay
from app.serving.writing import Writings
from app.settings import Settings, SettingsError, get_settings
from app.web import api, atlas, docs, encoder_decoder, experiments, pages, search, training, writing
from app.web.middleware import (
    BoundedSend,
    CancelOnDisconnect,
    ClientCookie,
    Compress,
    ForwardedClient,
    HeadAsGet,
    LimitBody,
    OneLineStartupFailure,
    SecurityHeaders,
    StreamsCounted,
)

log = logging.getLogger("uvicorn.error")  # uvicorn shows its INFO lines
CLOSE_SECONDS = 5  # how long a stopping lab waits for a store's connections to close
TRAINING_CLOSE_SECONDS = 10  # ... and for a training's last slice and its state saved


async def ended_within(seconds: float, closing, what: str) -> None:
    """Awaits `closing` for at most `seconds`, since a stopping lab must stop: a replica on Redis once stayed in
    its shutdown after SIGTERM, closing the class store's connections. Past the bound the log shows where every
    task still waits. asyncio.wait, not wait_for, which waits on for a cancelled await that does not end."""
    task = asyncio.ensure_future(closing)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done:
        task.result()
        return
    where = io.StringIO()
    for waiting in asyncio.all_tasks() - {asyncio.current_task()}:
        waiting.print_stack(file=where)
    task.cancel()
    log.warning(
        "%s took longer than %s s: the lab stops without it. Tasks waiting:\n%s", what, seconds, where.getvalue()
    )


def create_app(
    model: LoadedModel | None = None, specs: SpecStore | None = None, cross_encoder: CrossEncoder | None = None
) -> FastAPI:
    """The lab's app; `model` and the settings' cross-encoder are loaded and `specs` opened in the lifespan
    unless given (the CLI opens them first, to fail early in one line)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        check_protocol()
        settings = app.state.settings = get_settings()
        check_memory(settings)
        keep_freed_memory()
        all_threads_back = one_core_elsewhere()
        loaded = model or load_model(settings.model_path, placement=settings.placement)
        store = specs or open_spec_store(settings)
        app.state.secret = store.secret()  # signs the browsers' cookies (app.web.middleware.ClientCookie)
        cross = cross_encoder or (load_cross_encoder(settings.cross_encoder) if settings.cross_encoder else None)
        open_lab(app.state, settings, loaded, store, cross)
        # Told to stop, the work under way answers 503 at its next turn instead of being cut off at the grace.
        stop_on_signals(app.state.lab.gate.stop)
        app.state.corpora = CorpusAllowance(settings.corpus_bytes_per_hour)
        # A class lives where the run specs do when that is Redis (every worker sees it), else in this process.
        backend = (
            RedisBackend(settings.store, settings.store_timeout_seconds)
            if settings.store.startswith(REDIS_SCHEMES)
            else MemoryBackend()
        )
        classes = app.state.classes = Classes(backend, class_limits(settings), not_shared(backend, settings.workers))
        if classes.unavailable:
            log.warning("%s", classes.unavailable)
        else:
            classes.start()
        if reserved := reserve_size(settings):
            reserving = time.perf_counter()
            reserve(reserved)
            log.info(
                "Kept %.2f GiB free for runs in %.1f s (ATTENTION_LAB_RESERVE_BYTES%s; 0 turns this off)",
                reserved / 1024**3,
                time.perf_counter() - reserving,
                ""
                if reserved == min(settings.reserve_bytes, settings.max_store_bytes)
                else " lowered to half the memory this machine had available",
            )
        # What the lab holds from here on lives as long as the process: the model's modules and transformers',
        # torch's and the tokenizer's objects, about 540,000 that Python's cycle collector tracks. Frozen, its
        # full collections no longer walk them: each stopped every thread of the server for a long moment,
        # every few class bursts (bench/README.md). Given back to it when the lab stops (a test process starts
        # many).
        gc.freeze()
        yield
        gc.unfreeze()
        # Stopped without a signal (an ASGI server that ends the lifespan alone, a test's client), the gate is
        # told here, so that a training under way ends at its next slice and saves its state first.
        app.state.lab.gate.stop()
        await ended_within(TRAINING_CLOSE_SECONDS, app.state.trainings.close(), "a training saving its last state")
        await ended_within(CLOSE_SECONDS, classes.close(), "closing the class store's connections")
        store.close()
        app.state.lab.close()
        all_threads_back()

    # FastAPI's own /docs and /redoc load their scripts from a CDN; app.web.docs serves Swagger UI from the
    # installed fastapi-offline package instead, so the lab makes no request beyond itself.
    app = FastAPI(
        title="Attention Lab",
        summary="Every step of a real transformer's attention, with the real numbers.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    # From the innermost out: the last one added sees a request first.
    app.add_middleware(LimitBody)
    app.add_middleware(HeadAsGet)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(OneLineStartupFailure, errors=(ModelLoadError, StoreError, SettingsError))
    app.add_middleware(ClientCookie)
    app.add_middleware(CancelOnDisconnect)
    # The page and the API's answers go out compressed to a client that accepts it: static files come
    # compressed already (app.web.precompressed), and so do the attention matrices and a writing's stream
    # (app.web.compression), which go plain to a client on this machine.
    app.add_middleware(Compress, plain_to_this_machine=writing.PLAIN_TO_THIS_MACHINE)
    app.add_middleware(BoundedSend)
    app.add_middleware(ForwardedClient)
    app.add_middleware(StreamsCounted)
    app.include_router(api.router)
    app.include_router(encoder_decoder.router)
    app.include_router(experiments.router)
    app.include_router(atlas.router)
    app.include_router(search.router)
    app.include_router(writing.router)
    app.include_router(training.router)
    app.include_router(classroom.router)
    app.include_router(pages.router)
    app.include_router(docs.router)
    app.mount(docs.ASSETS_URL, StaticFiles(directory=docs.SWAGGER_UI), name="docs-assets")
    app.mount(pages.ASSETS_URL, pages.ImmutableFiles(directory=pages.ROOT / "static"), name="assets")
    app.mount("/static", pages.RevalidatedFiles(directory=pages.ROOT / "static"), name="static")
    handle_errors(app)
    return app


def build_lab(settings: Settings, loaded: LoadedModel, store: SpecStore) -> Lab:
    """The lab a server process serves (or a notebook's kernel, app.notebook): its gate and every bound from
    the settings, `loaded` its default model, `store` where its run specs are kept."""
    gate = PassGate(
        settings.max_concurrent_passes,
        settings.max_waiting,
        settings.max_waiting_per_client,
        settings.max_wait_seconds,
        max_waiting_per_address=settings.max_waiting_per_address,
    )
    return Lab(
        loaded,
        store,
        gate,
        max_chars=settings.max_chars,
        max_tokens=settings.max_tokens,
        max_runs=settings.max_runs,
        max_cache_bytes=settings.max_store_bytes,
        folders=settings.models,
        max_loaded_models=settings.max_loaded_models,
        max_batch_runs=settings.max_batch_runs,
        model_loads_per_hour=settings.model_loads_per_hour,
        placement=settings.placement,
        max_device_bytes=settings.max_device_bytes,
        grown=settings.data_dir / "models",
    )


def open_lab(
    state: State, settings: Settings, loaded: LoadedModel, store: SpecStore, cross_encoder: CrossEncoder | None = None
) -> None:
    """The lab and its rooms on an app's state, for the routers (app.web.deps): its runs and measures (lab), the
    head atlas (atlases), the experiments, search, writing and trainings, each bounded by the settings."""
    state.lab = lab = build_lab(settings, loaded, store)
    state.atlases = Atlases(lab, settings.max_ablation_tokens)
    state.experiments = Experiments(lab, settings.max_attribution_step_tokens, settings.max_patch_tokens)
    state.searches = Searches(lab, cross_encoder)
    state.writings = Writings(lab, settings.max_new_tokens)
    state.trainings = Trainings(
        lab,
        settings.data_dir,
        Bounds(
            settings.max_train_weights,
            settings.max_train_steps,
            settings.max_train_batch_tokens,
            settings.max_train_weight_tokens,
            settings.max_train_text_bytes,
        ),
        settings.class_streams_per_browser,
        settings.class_streams_per_address,
    )


def handle_errors(app: FastAPI) -> None:
    """What each of the lab's errors answers, in the server's app and in a notebook kernel's (app.notebook)."""
    app.add_exception_handler(TextTooLong, _error(413))
    app.add_exception_handler(InvalidInput, _error(422))
    app.add_exception_handler(RunNotFound, _error(404))
    app.add_exception_handler(OutOfRange, _error(404))
    app.add_exception_handler(RequestValidationError, readable_validation_error)
    app.add_exception_handler(StarletteHTTPException, unreadable_body)
    app.add_exception_handler(Busy, busy)
    app.add_exception_handler(ClassNotFound, _error(404))
    app.add_exception_handler(UnknownLearner, _error(404))
    app.add_exception_handler(NotTheTeacher, _error(403))
    app.add_exception_handler(NotYourLearner, _error(403))
    app.add_exception_handler(ClassLimit, _error(429))
    app.add_exception_handler(TooManyStreams, _error(429))
    app.add_exception_handler(ViewTooLarge, _error(413))
    app.add_exception_handler(WrongPhase, _error(409))
    app.add_exception_handler(BadChoice, _error(422))
    app.add_exception_handler(StoreDown, _error(503))
    app.add_exception_handler(ClassModeOff, _error(503))
    app.add_exception_handler(PassFailed, _error(503))
    app.add_exception_handler(StoreError, _error(503))
    app.add_exception_handler(TrainingNotFound, _error(404))
    app.add_exception_handler(TrainingUnderWay, _error(409))
    app.add_exception_handler(NotYourTraining, _error(403))
    app.add_exception_handler(TeacherOnly, _error(403))
    # Last resort: whatever else goes wrong answers as a clear 503 (the server still logs the traceback).
    app.add_exception_handler(Exception, unexpected)


def class_limits(settings: Settings) -> ClassLimits:
    return ClassLimits(
        ttl_seconds=settings.class_hours * 3600,
        max_classes=settings.max_classes,
        max_learners=settings.max_learners_per_class,
        actions_per_second=settings.class_actions_per_second,
        classes_per_client=settings.max_classes_per_client,
        starts_per_hour=settings.class_starts_per_hour,
        joins_per_minute=settings.class_joins_per_minute,
        learner_actions_per_second=settings.learner_actions_per_second,
        teacher_away_seconds=settings.class_teacher_away_seconds,
        streams_per_browser=settings.class_streams_per_browser,
        streams_per_address=settings.class_streams_per_address,
    )


def _error(status: int):
    async def handler(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=status)

    return handler


async def unreadable_body(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """FastAPI answers 400 for a body its JSON parser gave up on (nested too deep); that is malformed
    JSON to a client, like any other: 422, as the API promises."""
    if error.status_code == 400:
        return JSONResponse({"detail": "the request body could not be read as JSON (nested too deeply?)"}, 422)
    return await http_exception_handler(request, error)


async def unexpected(request: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"detail": "the lab hit an unexpected problem with this request; try again"}, status_code=503)


async def busy(request: Request, error: Busy) -> JSONResponse:
    """503 when the lab is full for everyone; 429 when this client alone has too much waiting."""
    status = 429 if isinstance(error, TooManyWaiting) else 503
    return JSONResponse({"detail": str(error)}, status_code=status, headers={"Retry-After": str(error.retry_after)})


async def readable_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """422 with one sentence a person can read first, and pydantic's list after it for tools."""
    errors = error.errors()
    messages = []
    for item in errors:
        if item["type"] == "json_invalid":
            messages.append("the request body is not valid JSON")
            continue
        where = ".".join(str(part) for part in item["loc"] if part != "body") or "body"
        messages.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return JSONResponse({"detail": "; ".join(messages), "errors": jsonable(errors)}, status_code=422)


def jsonable(errors: list[dict]) -> list[dict]:
    # pydantic puts the offending input and exception objects in each error; keep what JSON can carry.
    return [{"loc": list(item["loc"]), "msg": item["msg"], "type": item["type"]} for item in errors]


app = create_app()
