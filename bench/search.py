"""The search lesson (bench.py --search-only: that alone): the lab's corpus indexed against the raw padded passes
over it, a query against one raw pass + the exact search, and the HNSW graph's search time and recall@10."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import statistics
import time

import httpx
import numpy as np
import torch
from harness import lab_server, ms_since, proc_status_mb

from app.engine.engine import BATCH_TOKENS, batches
from app.engine.search import SAMPLE_QUERIES, shipped_documents


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
