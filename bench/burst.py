"""A class pressing Enter at once: 48 learners, each from its own address, send different prompts at the same
moment, against the raw padded batch and the raw model one prompt at a time (bench.py --burst-only: that alone)."""

import harness  # noqa: F401  (first: the environment every scenario runs in)

# isort: split
import asyncio
import json
import random
import statistics
import time

import httpx
import torch
from harness import FILLER, ms_since, time_raw_forward
from loadtool import Device  # beside this script

BURST_LEARNERS = 48  # a class pressing Enter within the same second
BURST_REPS = 7  # a single burst here ranges from about 310 to 600 ms: a median of 3 was no steadier


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
