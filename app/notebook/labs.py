"""Where a widget's requests go: the lab in this kernel, or a lab running elsewhere. Either is the lab's own
HTTP API behind an httpx client: in the kernel, the API's router and error answers (app.web.api,
app.main.handle_errors) over a Lab built from the settings as a server builds it (app.main.open_lab), called
in process; elsewhere, the running lab over HTTP. So a widget asks exactly what the page asks and gets exactly
what the page gets: the same routes, encodings (app.web.encoding) and error sentences.

The lab's work is asynchronous (its gate, its model's threads); a kernel runs its own event loop on its main
thread. Every lab client therefore lives on one event loop of its own, on a thread of its own: a request from
the kernel's thread is handed over and its answer comes back as a concurrent future."""

import asyncio
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path

import httpx
from fastapi import FastAPI

from app.engine.model import LoadedModel, adopt, load_model
from app.main import handle_errors, open_lab
from app.serving.spec_store import open_spec_store
from app.settings import get_settings
from app.web import api, experiments, writing

# What a widget may ask: the lab's API, nothing else of the server (nor of the machine the lab runs on).
API = "/api/"
TIMEOUT_SECONDS = 300  # a measure's blocks at 512 tokens (ALTI) take seconds; a model's load longer
# Headers that describe the transfer, not the answer: httpx has already undone them.
TRANSFER_HEADERS = {"content-encoding", "content-length", "transfer-encoding", "connection", "set-cookie"}


class LabError(RuntimeError):
    """The lab answered with an error; its own sentence says why."""


class LabClient:
    """One lab, asked through the lab's HTTP API from any thread of the kernel."""

    def __init__(self, client: httpx.AsyncClient, address: str):
        self.client = client
        self.address = address  # where the lab is: "this kernel", or its URL

    def request(self, method: str, path: str, body: str | None = None) -> Future:
        """The answer to one API request (a future of an httpx.Response); `path` with its query string."""
        if not path.startswith(API) or method not in ("GET", "POST"):
            raise LabError(f"a widget asks the lab's API only (GET or POST {API}…), not {method} {path}")
        headers = {"content-type": "application/json"} if body is not None else {}
        coroutine = self.client.request(method, path, content=body, headers=headers)
        return asyncio.run_coroutine_threadsafe(coroutine, labs_loop())

    def ask(self, method: str, path: str, body: str | None = None) -> httpx.Response:
        """One request's answer, waited for; an error answer raises LabError with the lab's own words."""
        try:
            response = self.request(method, path, body).result(TIMEOUT_SECONDS)
        except httpx.TransportError as error:
            raise LabError(f"the lab at {self.address} is not answering: {error}") from None
        if response.is_error:
            raise LabError(f"the lab at {self.address} answered {response.status_code}: {detail(response)}")
        return response


def detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text


def answer_headers(response: httpx.Response) -> dict[str, str]:
    """The headers a widget's page modules read (the attention's shape, dtype, scale, window), as sent."""
    return {name: value for name, value in response.headers.items() if name.lower() not in TRANSFER_HEADERS}


_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def labs_loop() -> asyncio.AbstractEventLoop:
    """The event loop every lab client of this kernel runs on, started on its own thread when first needed."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="attention-lab", daemon=True).start()
    return _loop


def api_app(loaded: LoadedModel) -> FastAPI:
    """The lab's API over a Lab of this kernel: the server's router, error answers and Lab, with `loaded` its
    model and its run specs kept in a temporary folder of its own (nothing written beside the notebook)."""
    settings = get_settings()
    folder = Path(tempfile.mkdtemp(prefix="attention-lab-"))
    store = open_spec_store(settings.model_copy(update={"store": "sqlite", "data_dir": folder}))
    app = FastAPI()
    app.include_router(api.router)
    app.include_router(experiments.router)
    app.include_router(writing.router)
    handle_errors(app)
    open_lab(app.state, settings, loaded, store)
    return app


_kernel_labs: dict[object, LabClient] = {}


def kernel_lab(model=None, tokenizer=None) -> LabClient:
    """The lab of one model in this kernel, made once per model: the packaged MiniLM (None), a folder or a Hub
    id in the local cache (a string, read as the lab's settings read ATTENTION_LAB_MODEL_PATH: offline), or a
    transformers model object with its tokenizer (app.engine.model.adopt)."""
    if model is not None and not isinstance(model, str | Path):
        if tokenizer is None:
            raise LabError("a model object needs its tokenizer: show(text, model, tokenizer)")
        key: object = ("object", id(model), id(tokenizer))
    else:
        key = ("reference", None if model is None else str(model))
    if key not in _kernel_labs:
        loaded = load_model(model) if key[0] == "reference" else adopt(model, tokenizer)
        transport = httpx.ASGITransport(app=api_app(loaded))
        client = httpx.AsyncClient(transport=transport, base_url="http://kernel", timeout=TIMEOUT_SECONDS)
        _kernel_labs[key] = LabClient(client, "this kernel")
    return _kernel_labs[key]


def running_lab(url: str) -> LabClient:
    """A lab running elsewhere, at its address (http://host:port)."""
    return LabClient(httpx.AsyncClient(base_url=url.rstrip("/"), timeout=TIMEOUT_SECONDS), url)
