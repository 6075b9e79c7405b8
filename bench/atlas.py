"""The head atlas: 500 sentences over HTTP against the raw padded passes of the same sentences, with the lab's
default ablation and without (bench.py --atlas-only: that alone, printed, nothing written)."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import statistics
import time

import httpx
import torch
from harness import lab_server, ms_since, proc_status_mb

from app.engine.atlas import added_tokens, shipped_sentences
from app.engine.engine import BATCH_TOKENS, batches
from app.engine.spec import AtlasSpec

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
