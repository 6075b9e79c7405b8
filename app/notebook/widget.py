"""The lab in a notebook: show() returns one anywidget that draws the page's own views (static/js) with a
run of the lab's own engine, and whose selection (block, head, token, measure, …) is a traitlet each, read
and set from Python, changed by clicks.

How the views are reused, not copied: anywidget loads one ES module (widget.js); the page's views are many
modules that import each other relatively and find their elements by id. The widget sends their sources in
dependency order (_modules); widget.js makes each a blob: URL with its relative imports pointed at the blob
URLs of the modules before it, so every widget has its own copy of the modules (their caches, their transport,
their root), and draws in a shadow root of its own (root.js), which also keeps the page's stylesheet to the
widget. The views' requests go through api.js's transport to the kernel (msg:custom), which asks the lab's
own API (app.notebook.labs) and sends the answer back as it came: JSON, or the attention endpoint's compact
bytes (app.web.encoding) as a binary buffer, or a writing's events in parts as they are written.
"""

import json
from concurrent.futures import Future
from graphlib import TopologicalSorter
from pathlib import Path
from urllib.parse import quote

import anywidget
from traitlets import Bool, Dict, Enum, Int, List, TraitError, Unicode, Union, observe, validate

from app.engine.measures import Measure
from app.notebook.labs import LabClient, LabError, answer_headers, kernel_lab, running_lab
from app.notebook.links import address_of, view_of
from app.web.pages import DEFAULT_TEXT, ROOT, imports, measures_config

HERE = Path(__file__).parent
PAGE_JS = ROOT / "static" / "js"
# The page's modules the widget draws with: its views, what they import, and nothing of the page's own frame
# (its URL state, prompt, controls, panels, class).
VIEW_MODULES = [
    "root.js",
    "api.js",
    "data.js",
    "measures.js",
    "format.js",
    "views.js",
    "tokens.js",
    "attention.js",
    "attends.js",
    "grid.js",
    "dissection.js",
    "headset.js",
    "write.js",
    "seq2seq/views.js",  # an encoder-decoder's: its source and target, and its three kinds of attention
]
LONG_FROM = 512  # tokens: static/js/data.js's; a longer run's first view comes max-pooled to this many a side
VIEW_KEYS = {
    "text",
    "pair",
    "mask",
    "pooling",
    "prompt",
    "patch",
    "block",
    "head",
    "heads",
    "block_mean",
    "token",
    "also",
    "measure",
    "sinks",
    "segments",
    "scale",
    "all_heads",
    "panel",
    "target",
    "kind",
}
PAIR_KINDS = ("encoder", "decoder", "cross")  # an encoder-decoder's kinds of attention (app.engine.encoder_decoder)
PAIR_ROWS = {"encoder": "source", "decoder": "target", "cross": "target"}  # whose tokens each kind's rows are


def page_modules() -> list[list[str]]:
    """[name, source] of every module the widget imports, each after the modules it imports."""
    graph: dict[str, list[str]] = {}
    waiting = list(VIEW_MODULES)
    while waiting:
        module = waiting.pop()
        if module not in graph:
            graph[module] = imports(PAGE_JS, module)
            waiting.extend(graph[module])
    return [[name, (PAGE_JS / name).read_text()] for name in TopologicalSorter(graph).static_order()]


def styles() -> str:
    """The page's stylesheet, then the widget's frame (widget.css)."""
    return (ROOT / "static" / "lab.css").read_text() + (HERE / "widget.css").read_text()


class LabWidget(anywidget.AnyWidget):
    """The lab's views of one run. `run` is the lab's analyze answer (its tokens, and the first view's matrix as
    the page gets it); the view traitlets are what the page's link holds. Setting text, pair, mask, pooling,
    prompt or patch runs the model again; the others only change what is drawn."""

    _esm = HERE / "widget.js"
    _modules = List().tag(sync=True)
    _styles = Unicode().tag(sync=True)
    config = Dict().tag(sync=True)  # the measures as the page's config has them, and the model's shape (GET /api/model)
    run = Dict().tag(sync=True)
    first_view = Dict().tag(sync=True)  # the view whose matrix `run` carries ({} for none)
    error = Unicode("").tag(sync=True)

    text = Unicode(DEFAULT_TEXT).tag(sync=True)
    pair = Unicode("").tag(sync=True)
    mask = Unicode().tag(sync=True)
    pooling = Unicode().tag(sync=True)
    prompt = Unicode(None, allow_none=True).tag(sync=True)  # one of the model's prompts; None: its default
    patch = Dict().tag(sync=True)  # B's activation put into the pass (a cell of POST /api/patch); {}: none
    block = Int(0).tag(sync=True)
    head = Union([Int(), Enum(["mean"])], default_value=0).tag(sync=True)
    heads = List(Int()).tag(sync=True)  # the heads "mean" averages
    block_mean = Bool(False).tag(sync=True)
    token = Int(None, allow_none=True).tag(sync=True)
    also = List(Int()).tag(sync=True)  # more selected tokens (shift-click): their rows are averaged
    measure = Enum(list(Measure.__args__), "weights").tag(sync=True)
    sinks = Enum(["show", "hide", "renormalise"], "show").tag(sync=True)
    segments = Enum(["all", "AA", "AB", "BA", "BB"], "all").tag(sync=True)
    scale = Enum(["blues", "viridis", "cividis"], "blues").tag(sync=True)
    all_heads = Bool(False).tag(sync=True)
    panel = Enum(["dissection", "grid", "write"], None, allow_none=True).tag(
        sync=True
    )  # the open panel; None: none, as on the page
    # An encoder-decoder's: the target read with the source (text), "" for one the model writes greedily, and which
    # of its three kinds of attention the views draw (their rows: the source's tokens or the target's).
    target = Unicode("").tag(sync=True)
    kind = Enum(list(PAIR_KINDS), "cross").tag(sync=True)

    def __init__(self, lab: LabClient, model: str | None = None, **view):
        unknown = set(view) - VIEW_KEYS
        if unknown:
            raise TypeError(f"show() takes no {', '.join(sorted(unknown))}: a view is {', '.join(sorted(VIEW_KEYS))}")
        self._lab = lab
        self._model = model
        self._relays: dict[str, Future] = {}  # the views' requests under way, by id: a stream is left by its id
        self._ready = False
        info = lab.ask("GET", "/api/model" + (f"?name={quote(model)}" if model else "")).json()
        defaults = {"mask": info["default_mask"], "pooling": info["default_pooling"], "heads": [*range(info["heads"])]}
        config = {**measures_config(), "model": info}
        values = {**defaults, **view}
        if "kind" in values:  # an encoder-decoder's block is checked against its kind's stack: the kind goes first
            values = {"kind": values.pop("kind"), **values}
        super().__init__(_modules=page_modules(), _styles=styles(), config=config, **values)
        self.on_msg(self._on_message)
        self._ready = True
        self._analyze()

    @property
    def info(self) -> dict:
        return self.config["model"]

    @property
    def _pair(self) -> bool:
        """An encoder-decoder's widget: a source (text) and a target."""
        return self.info["kind"] == "encoder-decoder"

    def _rows(self) -> int | None:
        """How many tokens the view's rows have: the run's, or an encoder-decoder's kind's side (None: no run yet)."""
        if not self.run:
            return None
        return len(self.run[PAIR_ROWS[self.kind]]["tokens"] if self._pair else self.run["tokens"])

    def _analyze(self) -> None:
        """The model run on the text (POST /api/analyze, as the page asks it), with the first view's matrix; an
        encoder-decoder's on the source and the target, every kind of attention whole (its views draw from it)."""
        if self._pair:
            return self._analyze_pair()
        first = self._first_view()
        body = {
            "text": self.text,
            "text_pair": self.pair or None,
            "mask": self.mask,
            "pooling": self.pooling,
            "prompt": self.prompt,
            "model": self._model,
            "patch": self.patch or None,
            "attention": first,
        }
        try:
            run = self._lab.ask("POST", "/api/analyze", json.dumps(body)).json()
        except LabError as error:
            self.error = str(error)
            raise
        n = len(run["tokens"])
        content = next((token["index"] for token in run["tokens"] if not token["special"]), 0)
        with self.hold_sync():
            self.error = ""
            self.first_view = {} if first is None else {"layer": self.block, "head": self.head, "measure": "weights"}
            self.also = [index for index in self.also if index < n]
            self.run = run
            self.token = self.token if self.token is not None and self.token < n else content

    def _analyze_pair(self) -> None:
        body = {"text": self.text, "target": self.target or None, "model": self._model}
        try:
            run = self._lab.ask("POST", "/api/analyze", json.dumps(body)).json()
        except LabError as error:
            self.error = str(error)
            raise
        rows = run[PAIR_ROWS[self.kind]]["tokens"]
        content = next((token["index"] for token in rows if not token["added"]), 0)
        with self.hold_sync():
            self.error = ""
            self.first_view = {}
            self.run = run
            self.token = self.token if self.token is not None and self.token < len(rows) else content

    def _first_view(self) -> dict | None:
        """The analyze request's `attention` for the view drawn first, as the page asks it (static/js/data.js,
        firstView): one head's weights in float32, pooled past LONG_FROM tokens. None for a mean or another
        measure, which the widget asks for as it draws."""
        if self.measure != "weights" or self.head == "mean" or self.block_mean:
            return None
        return {"dtype": "float32", "measure": "weights", "layer": self.block, "head": self.head, "size": LONG_FROM}

    @observe("text", "pair", "mask", "pooling", "prompt", "patch", "target")
    def _text_changed(self, _) -> None:
        if self._ready:
            self._analyze()

    @observe("kind")
    def _kind_changed(self, _) -> None:
        """Another kind of attention: its own stack's blocks and its own rows, the selection kept where it fits."""
        if not self._ready:
            return
        blocks = self.info["layers"] if self.kind == "encoder" else self.info["decoder_layers"]
        with self.hold_sync():
            self.block = min(self.block, blocks - 1)
            if self.token is not None and self.token >= self._rows():
                self.token = self._rows() - 1

    @validate("block")
    def _valid_block(self, proposal):
        blocks = self.info["decoder_layers"] if self._pair and self.kind != "encoder" else self.info["layers"]
        return self._within(proposal["value"], blocks, "block")

    @validate("target")
    def _valid_target(self, proposal):
        if proposal["value"] and not self._pair:
            raise TraitError(f"{self.info['name']} reads one text: a target is read by an encoder-decoder")
        return proposal["value"]

    @validate("head")
    def _valid_head(self, proposal):
        value = proposal["value"]
        return value if value == "mean" else self._within(value, self.info["heads"], "head")

    @validate("heads")
    def _valid_heads(self, proposal):
        heads = sorted({self._within(head, self.info["heads"], "head") for head in proposal["value"]})
        if not heads:
            raise TraitError("a mean of heads needs at least one head")
        return heads

    @validate("token")
    def _valid_token(self, proposal):
        value = proposal["value"]
        return value if value is None or not self.run else self._within(value, self._rows(), "token")

    @validate("also")
    def _valid_also(self, proposal):
        n = self._rows()
        return [index if n is None else self._within(index, n, "token") for index in proposal["value"]]

    @validate("mask")
    def _valid_mask(self, proposal):
        return self._among(proposal["value"], self.info["masks"], "mask")

    @validate("pooling")
    def _valid_pooling(self, proposal):
        return self._among(proposal["value"], self.info["poolings"], "pooling")

    def _within(self, value: int, count: int, what: str) -> int:
        if not 0 <= value < count:
            raise TraitError(f"{what} {value} does not exist: {self.info['name']} has {what}s 0 to {count - 1}")
        return value

    def _among(self, value: str, choices: list[str], what: str) -> str:
        if value not in choices:
            raise TraitError(f"{self.info['name']} has no {what} {value!r}: it has {', '.join(choices)}")
        return value

    def _on_message(self, _, content: dict, buffers) -> None:
        """A view's request (api.js through widget.js's transport), asked of the lab; the answer goes back with
        its status and headers, its body as one binary buffer, or a stream's (a writing's events) in parts as
        the lab sends them, then its end. A view that leaves a stream (abort) leaves it at the lab too."""
        ident = content.get("id")
        if content.get("kind") == "abort":
            relaying = self._relays.pop(ident, None)
            if relaying is not None:
                relaying.cancel()
            return
        if content.get("kind") != "fetch":
            return
        said = {"answered": False, "streamed": False}

        def answered(response, body: bytes | None) -> None:
            said.update(answered=True, streamed=body is None)
            head = {"kind": "answer", "id": ident, "status": response.status_code, "headers": answer_headers(response)}
            self.send({**head, "streamed": body is None}, buffers=[] if body is None else [body])

        def ended(done) -> None:
            self._relays.pop(ident, None)
            if done.cancelled():
                return  # the view left: it ended the stream on its side
            error = done.exception()
            if not said["answered"]:  # the lab did not answer at all: the view says the lab is not answering
                self.send({"kind": "answer", "id": ident, "error": str(error)})
            elif said["streamed"]:
                self.send({"kind": "end", "id": ident, **({"error": str(error)} if error else {})})

        part = lambda piece: self.send({"kind": "part", "id": ident}, buffers=[piece])  # noqa: E731
        try:
            relaying = self._lab.relay(content["method"], content["url"], content.get("body"), answered, part)
        except LabError as error:
            self.send({"kind": "answer", "id": ident, "error": str(error)})
            return
        self._relays[ident] = relaying
        relaying.add_done_callback(ended)


def show(
    text: str | None = None, model=None, tokenizer=None, *, run: str | None = None, lab: str | None = None, **view
):
    """The lab's views of a text, as a widget.

    model: None for the packaged MiniLM; a string for a model folder or a Hub id in the local Hugging Face cache
    (read as ATTENTION_LAB_MODEL_PATH is, offline); or a transformers model object with its `tokenizer`, used as
    it is in memory. run: a link of a running lab (its "Copy link"): that run and view, from the lab at `lab`
    (by default, the link's own address). lab alone: a new run on that running lab, of its model `model` (a
    name it serves; None: its default). view: what the page's link sets: block (or layer), head ("mean" too),
    heads, block_mean, token, also, measure, mask, pooling, prompt, patch, pair, sinks, segments, scale, panel; an
    encoder-decoder's (T5, BART, Marian: `text` is its source) target ("" or none: the model writes one) and kind
    ("encoder", "decoder" or "cross", the attention the views draw; block and token are that kind's).
    """
    if "layer" in view:
        view["block"] = view.pop("layer")
    if text is not None:
        view["text"] = text
    if run is not None:
        linked = view_of(run)
        return LabWidget(running_lab(lab or address_of(run)), linked.pop("model", None), **{**linked, **view})
    if lab is not None:
        if model is not None and not isinstance(model, str):
            raise TypeError("a running lab reads its own models: give one it serves by name")
        return LabWidget(running_lab(lab), model, **view)
    return LabWidget(kernel_lab(model, tokenizer), **view)
