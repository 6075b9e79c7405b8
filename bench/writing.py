"""Writing benchmark: the engine's step loop (app.engine.writing) against transformers' model.generate, side by
side in one run, on the same model with the same knobs.

The model is a random GPT-2-shaped decoder built here, offline: 6 blocks, 8 heads, hidden 256, GPT-2's 50,257-token
vocabulary (a word-level tokenizer of as many made-up words) and 1,024 positions, read by the lab's own loader
(eager attention, float32). For each setting (greedy, and sampling with temperature, top-k and top-p) it measures,
alternating the two sides, every number a median of --reps repetitions:
- tokens per second of a whole writing: the engine's Writing stepped to its end (every step opened: the funnel,
  the race, the attention rows, the cache) against model.generate after torch.manual_seed, which must write the
  same tokens (checked);
- the first token, apart from the whole writings, in writings of one new token: a Writing made and stepped once,
  against one forward pass of the prompt (model(input_ids)), and against one that makes the last position's
  logits alone, as generate's first pass does (logits_to_keep=1);
- over HTTP: the lab itself (`python -m app` serving the same folder, on a free loopback port) asked for the same
  writing as POST /api/generate/stream, each step's event read as it comes (every step opened and sent as JSON,
  its attention rows included): tokens per second from the request to its "done" event, and the first token (a
  writing of one token), from the request to its "step" event, against the same forward passes. Each request's
  seed differs (the same spec would be one writing for every request at once) and generate is given the same seed.
It prints the table and the ratios. Run it with `python bench/writing.py`; nothing is written to disk but the
model's temporary folder and the lab's spec store in it.
"""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import torch
from harness import lab_server, ms_since
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.utils import logging as transformers_logging

from app.engine.engine import Engine
from app.engine.model import load_model
from app.engine.writing import Knobs, writing

VOCABULARY = 50_257
END = "<|endoftext|>"
SETTINGS = {
    "greedy": {"do_sample": False},
    "sampled (t 0.8, top-k 50, top-p 0.95)": {"do_sample": True, "temperature": 0.8, "top_k": 50, "top_p": 0.95},
}


def gpt2_shaped(folder: Path) -> Path:
    """A random GPT-2-shaped decoder and a word-level tokenizer over its whole vocabulary, saved in `folder`."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCABULARY, n_positions=1024, n_embd=256, n_layer=6, n_head=8, bos_token_id=0, eos_token_id=0
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    words = {END: 0, **{f"w{index}": index for index in range(1, VOCABULARY)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token=END))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=END, eos_token=END, unk_token=END, model_max_length=1024
    ).save_pretrained(folder)
    return folder


def engine_writing(engine: Engine, prompt: str, knobs: Knobs) -> tuple[float, list[int]]:
    """ms for a whole writing, made and stepped to its end, and its tokens."""
    start = time.perf_counter()
    writer = writing(engine, prompt, knobs)
    for step in writer.slices():
        step()
    return ms_since(start), writer.new_ids


def generated(engine: Engine, ids: torch.Tensor, knobs: Knobs) -> tuple[float, list[int]]:
    """ms for model.generate with the same knobs after torch.manual_seed(seed), and its new tokens."""
    with torch.random.fork_rng():
        start = time.perf_counter()
        torch.manual_seed(knobs.seed)
        out = engine.loaded.model.generate(ids, **knobs.generate_kwargs())
        return ms_since(start), out[0, ids.shape[1] :].tolist()


def first_token(engine: Engine, prompt: str, knobs: Knobs) -> float:
    start = time.perf_counter()
    writing(engine, prompt, knobs).step()
    return ms_since(start)


def one_forward(engine: Engine, ids: torch.Tensor, last_logits_only: bool = False) -> float:
    """ms for one forward pass of the prompt: every position's logits, or the last one's alone (logits_to_keep=1,
    as generate's first pass and the engine's first step make them)."""
    keep = {"logits_to_keep": 1} if last_logits_only else {}
    with torch.inference_mode():
        start = time.perf_counter()
        engine.loaded.model(input_ids=ids, **keep)
        return ms_since(start)


def streamed(client: httpx.Client, prompt: str, knobs: Knobs) -> tuple[float, float, list[int]]:
    """ms to the first "step" event and to the "done" event of POST /api/generate/stream, and the tokens written."""
    body = {"text": prompt, "max_new_tokens": knobs.max_new_tokens, "seed": knobs.seed}
    body |= {name: value for name, value in knobs.generate_kwargs().items() if name != "max_new_tokens"}
    first, ids, event = None, [], None
    start = time.perf_counter()
    with client.stream("POST", "/api/generate/stream", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event == "step":
                first = first or ms_since(start)
                ids.append(json.loads(line.removeprefix("data: "))["token"])
            elif line.startswith("data: ") and event == "done":
                return first, ms_since(start), ids
            elif line.startswith("data: ") and event == "error":
                raise SystemExit(f"the lab's writing failed: {line}")
    raise SystemExit("the stream ended without its done event")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, help="torch's threads for both sides (default: torch's own, a thread a core)"
    )
    arguments = parser.parse_args()
    if arguments.threads:
        # One thread is what a busy shared machine measures best: two wait for each other's wake at every
        # operation, and then time tells the machine's load more than the work done.
        torch.set_num_threads(arguments.threads)
    transformers_logging.set_verbosity_error()  # generate's notes on its defaults would break up the table
    with tempfile.TemporaryDirectory() as folder:
        model = gpt2_shaped(Path(folder) / "gpt2-shaped")
        engine = Engine(load_model(model), max_chars=100_000)
        env = {
            "ATTENTION_LAB_MODEL_PATH": str(model),
            "ATTENTION_LAB_DATA_DIR": folder,
            "ATTENTION_LAB_RESERVE_BYTES": "0",
        }
        if arguments.threads:  # the lab's passes on as many threads as the bench's own
            env["OMP_NUM_THREADS"] = str(arguments.threads)
        with lab_server(env) as (base, _), httpx.Client(base_url=base, timeout=600) as client:
            table(engine, client, arguments)


def table(engine: Engine, client: httpx.Client, arguments: argparse.Namespace) -> None:
    load = os.getloadavg()[0]
    print(
        "| prompt tokens | setting | engine tokens/s | generate tokens/s | engine/generate | HTTP stream tokens/s "
        "| HTTP/generate | first token ms | HTTP first token ms | one forward ms | first/forward | HTTP first/forward "
        "| forward, last logits ms | first/that |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    seeds = iter(range(1, 1_000_000))
    for length in arguments.prompt_tokens:
        prompt = " ".join(f"w{1 + (index * 7919) % (VOCABULARY - 1)}" for index in range(length))
        ids = torch.tensor([[token.id for token in engine.tokenize(prompt)[0]]])
        for name, setting in SETTINGS.items():
            knobs = Knobs(max_new_tokens=arguments.new_tokens, seed=next(seeds), **setting)
            engine_writing(engine, prompt, knobs), generated(engine, ids, knobs), streamed(client, prompt, knobs)
            ours, theirs, served, firsts, served_firsts, forwards, lasts = [], [], [], [], [], [], []
            for _ in range(arguments.reps):  # alternating, so that a busy moment of the machine hits every side
                knobs = Knobs(max_new_tokens=arguments.new_tokens, seed=next(seeds), **setting)
                (ms, tokens), (generate_ms, generate_tokens) = (
                    engine_writing(engine, prompt, knobs),
                    generated(engine, ids, knobs),
                )
                _, served_ms, served_tokens = streamed(client, prompt, knobs)
                if not tokens == generate_tokens == served_tokens:
                    raise SystemExit(
                        f"the engine wrote {tokens}, generate {generate_tokens}, the lab {served_tokens}: not the same"
                    )
                ours.append(len(tokens) / ms * 1000)
                theirs.append(len(tokens) / generate_ms * 1000)
                served.append(len(tokens) / served_ms * 1000)
            # The first token apart, in writings of one token, alternating with the forward passes: timed right after
            # a whole writing, it measured what that writing's process still did on the two cores (the engine's first
            # token took 2-3.6x a forward there, 0.4-1.04x apart).
            for _ in range(arguments.reps):
                knobs = Knobs(max_new_tokens=1, seed=next(seeds), **setting)
                forwards.append(one_forward(engine, ids))
                firsts.append(first_token(engine, prompt, knobs))
                served_firsts.append(streamed(client, prompt, knobs)[0])
                lasts.append(one_forward(engine, ids, last_logits_only=True))
            rate, generate_rate, http_rate = (statistics.median(rates) for rates in (ours, theirs, served))
            first, http_first, forward, last = (
                statistics.median(times) for times in (firsts, served_firsts, forwards, lasts)
            )
            print(
                f"| {length} | {name} | {rate:.1f} | {generate_rate:.1f} | {rate / generate_rate:.2f}× "
                f"| {http_rate:.1f} | {http_rate / generate_rate:.2f}× | {first:.1f} | {http_first:.1f} "
                f"| {forward:.1f} | {first / forward:.2f}× | {http_first / forward:.2f}× | {last:.1f} "
                f"| {first / last:.2f}× |"
            )
    print(
        f"\n{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), Python "
        f"{platform.python_version()}; {arguments.new_tokens} new tokens a writing, medians of {arguments.reps}; "
        f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    main()
