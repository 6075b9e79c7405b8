"""Where a widget's requests go: the lab in this kernel, or a lab running elsewhere. Either is the lab's own
HTTP API behind an httpx client: in the kernel, the API's router and error answers (app.web.api,
app.main.handle_errors) over a Lab built from the settings as a server builds it (app.main.open_lab), called
in process; elsewhere, the running lab over HTTP. So a widget asks exactly what the page asks and gets exactly
what the page gets: the same routes, encodings (app.web.encoding) and error sentences.

The lab's work is asynchronous (its gate, its model's threads); a kernel runs its own event loop on its main
thread. Every lab client therefore lives on one event loop of its own, on a thread of its own: a request from
the kernel's thread is handed over and its answer comes back as a concurrent future. An answer the lab streams
(a writing's events) is relayed as it comes, in parts, from the kernel's lab as from a running one."""

import asyncio
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
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

    def relay(
        self,
        method: str,
        path: str,
        body: str | None,
        answered: Callable[[httpx.Response, bytes | None], None],
        part: Callable[[bytes], None],
    ) -> Future:
        """One request's answer as it comes, for a view: `answered(response, body)` once the lab answers, with its
        whole body, or with None for a stream of events (text/event-stream), whose body then goes to `part` piece by
        piece as the lab sends it. A future of the relay's end; cancelling it leaves the stream, as a page's
        leaving does (the lab calls a writing off once nobody follows it)."""
        if not path.startswith(API) or method not in ("GET", "POST"):
            raise LabError(f"a widget asks the lab's API only (GET or POST {API}…), not {method} {path}")
        headers = {"content-type": "application/json"} if body is not None else {}
        request = self.client.build_request(method, path, content=body, headers=headers)

        async def relayed() -> None:
            response = await self.client.send(request, stream=True)
            try:
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    answered(response, await response.aread())
                    return
                answered(response, None)
                async for piece in response.aiter_bytes():
                    part(piece)
            finally:
                await response.aclose()

        return asyncio.run_coroutine_threadsafe(relayed(), labs_loop())

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


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """httpx's ASGITransport, but an answer's body streams as the app sends it (httpx's gathers it whole first,
    so a writing's events would come at its end): the response is handed over once the app starts it, and
    closing it before its end is the client leaving (the app is told so, and stopped)."""

    def __init__(self, app: FastAPI, client: tuple[str, int] = ("127.0.0.1", 123)):
        self.app = app
        self.client = client  # the address the lab sees: this machine, as httpx's ASGITransport says it

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(name.lower(), value) for name, value in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": self.client,
            "root_path": "",
        }
        body = await request.aread()
        started: asyncio.Future = asyncio.get_running_loop().create_future()
        parts: asyncio.Queue = asyncio.Queue()  # the body's parts, then None at its end (or the app's error)
        left = asyncio.Event()
        asked = False

        async def receive() -> dict:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": body, "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                started.set_result(message)
            elif message["type"] == "http.response.body":
                if message.get("body") and request.method != "HEAD":
                    parts.put_nowait(message["body"])
                if not message.get("more_body", False):
                    parts.put_nowait(None)

        async def run() -> None:
            try:
                await self.app(scope, receive, send)
            except Exception as error:  # before the answer started, the request's; after, its body's
                if not started.done():
                    started.set_exception(error)
                parts.put_nowait(error)
            finally:
                if not started.done():
                    started.set_exception(RuntimeError("the lab answered nothing"))
                parts.put_nowait(None)

        task = asyncio.ensure_future(run())
        try:
            message = await started
        except BaseException:
            task.cancel()
            raise
        return httpx.Response(message["status"], headers=message.get("headers", []), stream=_Parts(parts, left, task))


class _Parts(httpx.AsyncByteStream):
    def __init__(self, parts: asyncio.Queue, left: asyncio.Event, task: asyncio.Future):
        self.parts, self.left, self.task = parts, left, task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (part := await self.parts.get()) is not None:
            if isinstance(part, Exception):
                raise part
            yield part

    async def aclose(self) -> None:
        """The reader is done: at the body's end nothing is left to do; before it, the client left."""
        self.left.set()
        if not self.task.done():
            self.task.cancel()


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
        transport = StreamingASGITransport(api_app(loaded))
        client = httpx.AsyncClient(transport=transport, base_url="http://kernel", timeout=TIMEOUT_SECONDS)
        _kernel_labs[key] = LabClient(client, "this kernel")
    return _kernel_labs[key]


def running_lab(url: str) -> LabClient:
    """A lab running elsewhere, at its address (http://host:port)."""
    return LabClient(httpx.AsyncClient(base_url=url.rstrip("/"), timeout=TIMEOUT_SECONDS), url)
