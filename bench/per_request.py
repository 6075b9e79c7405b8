"""Per request, for each input length N: the raw forward pass against the lab over HTTP (POST /api/analyze, then
GET /api/runs/{id}/attention, all 72 heads), the lab of 2026-12-04 beside it, the bytes of the matrices on the
wire, bertviz's head_view on the same attentions, and the lab server's memory after 64 distinct 512-token
runs."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import torch
from harness import REPO, Texts, lab_server, median, ms_since, proc_status_mb, time_raw_floor, time_raw_forward

MEMORY_RUNS = 64
BERTVIZ_MAX_REPS = 3  # bertviz takes ~30 s and ~900 MB at N=512: once there, at most 3 times below
BERTVIZ_ONCE_FROM = 512
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


def time_bertviz(model, tokenizer, text: str) -> dict:
    from bertviz import head_view  # imported only when asked for: it pulls in IPython

    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        attentions = model(input_ids=ids, output_attentions=True).attentions
    tokens = tokenizer.convert_ids_to_tokens(ids[0])
    start = time.perf_counter()
    html = head_view(attentions, tokens, html_action="return")
    return {"head_view_ms": ms_since(start), "html_bytes": len(html.data.encode())}


def measure_memory(client: httpx.Client, pid: int, texts: Texts) -> dict:
    for _ in range(MEMORY_RUNS):
        client.post("/api/analyze", json={"text": texts.unique(512)}).raise_for_status()
    return {
        "runs_posted": MEMORY_RUNS,
        "tokens_each": 512,
        **proc_status_mb(pid),
        "health": client.get("/api/health").json(),
    }


def memory_line(memory: dict) -> str:
    return (
        f"Lab server after {memory['runs_posted']} distinct {memory['tokens_each']}-token runs: "
        f"peak RSS {memory['peak_rss_mb']:.0f} MB, current RSS {memory['rss_mb']:.0f} MB; "
        f"/api/health: {json.dumps(memory['health'])}"
    )
