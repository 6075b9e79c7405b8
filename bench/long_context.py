"""The long-context table (bench.py --long-only: that alone, printed, nothing written): a tiny random Llama-style
decoder of 8,192 positions (4 blocks, 8 heads, hidden 256, built here, offline) at 1,024 to 8,192 tokens: the
bytes a run keeps, analyze + its first view against the raw pass (output_attentions=False), and in chromium
Enter → the first heatmap and a zoom → exact cells."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import torch
from harness import lab_server, median, ms_since, proc_status_mb
from page import ARM_ENTER_PROBE, PROBE_TIMES, Network, lab_page, settle
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.families import long_llama

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
