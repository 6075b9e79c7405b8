"""POST /api/generate and its streams (app.web.writing, app.serving.writing) on tiny random GPT-2, Llama and Qwen3
folders, one lab for the module: the tokens of model.generate after torch.manual_seed, the funnel and the rows of
transformers' own passes, the stream equal to the answer, a follower given every token once and in order, the
stream plain to a client on this machine and compressed to one elsewhere, a writing that ended kept for the
followers who come after, the bounds, a writing called off when its client leaves, the process's RNG left alone,
and an encoder refused."""

import asyncio
import base64
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import brotli
import numpy as np
import pytest
import torch
import zstandard
from fastapi.testclient import TestClient
from transformers import TemperatureLogitsWarper

from app.engine.labels import shown
from app.engine.model import load_model, packaged_model_path
from app.engine.writing import Knobs, Writing
from app.main import create_app
from app.serving.gate import Client, TooManyWaiting
from app.serving.writing import Writings, kept_key
from app.settings import get_settings
from tests.conftest import make_lab, run_async
from tests.families import build
from tests.float32 import pass_tolerance

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The cat sat on the mat. The cat"
FAMILIES = ["gpt2", "llama", "qwen3"]
MOST = 24  # ATTENTION_LAB_MAX_NEW_TOKENS for this module's lab
SAMPLED = [
    {"do_sample": True, "temperature": 1.5, "top_k": 0, "top_p": 1.0, "seed": 7},
    {"do_sample": True, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 2**40},
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    return {name: build(name, tmp_path_factory.mktemp(name) / name) for name in FAMILIES}


@pytest.fixture(scope="module")
def models(folders) -> dict:
    """transformers' own models of the folders, as generate runs them (eager attention, for their rows)."""
    return {name: load_model(folder).model for name, folder in folders.items()}


@pytest.fixture(scope="module")
def client(folders):
    """The lab serving the tiny GPT-2 by default, the tiny Llama and Qwen3 and the packaged MiniLM beside it; its
    requests come from a client on this machine (127.0.0.9) unless they name another (ELSEWHERE)."""
    with pytest.MonkeyPatch.context() as patch:
        others = [str(folders["llama"]), str(folders["qwen3"]), str(packaged_model_path())]
        patch.setenv("ATTENTION_LAB_MODELS", ",".join(others))
        patch.setenv("ATTENTION_LAB_MAX_LOADED_MODELS", "4")
        patch.setenv("ATTENTION_LAB_MAX_NEW_TOKENS", str(MOST))
        patch.setenv("ATTENTION_LAB_TRUSTED_PROXIES", "127.0.0.9")
        patch.setenv("ATTENTION_LAB_CLASS_ACTIONS_PER_SECOND", "1000")  # the class questions' quick teacher moves
        get_settings.cache_clear()
        with TestClient(create_app(load_model(folders["gpt2"])), client=("127.0.0.9", 40000)) as test_client:
            yield test_client
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def names(client) -> dict:
    """Each model by the name the lab serves it under: a folder's name (the packaged MiniLM's is "model")."""
    listed = [model["name"] for model in client.get("/api/models").json()["models"]]
    return {**{family: family for family in FAMILIES}, "minilm": next(n for n in listed if n not in FAMILIES)}


def generated(model, prompt: list[int], knobs: dict) -> list[int]:
    """transformers' own new tokens after torch.manual_seed(seed)."""
    kwargs = {name: value for name, value in knobs.items() if name != "seed"}
    with torch.random.fork_rng():
        torch.manual_seed(knobs.get("seed", 0))
        out = model.generate(torch.tensor([prompt]), **kwargs)
    return out[0, len(prompt) :].tolist()


def rows_of(step: dict) -> torch.Tensor:
    """A step's attention rows, [layer, head, key], from their float32 bytes."""
    rows = step["attention"]
    assert rows["dtype"] == "float32"
    data = np.frombuffer(base64.b64decode(rows["data"]), dtype="<f4")
    return torch.from_numpy(data.copy()).reshape(rows["shape"])


def events(text: str) -> list[tuple[str, dict]]:
    """The server-sent events of a stream's body, in order."""
    found = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith((":", "retry")))
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


@pytest.mark.parametrize("family", FAMILIES)
def test_the_lab_writes_what_generate_writes(client, names, models, family):
    """Greedy and two sampled settings (seeds beyond 2³²); every step's first stage is the softmax of the full
    pass's last logits, and its rows the full pass's last rows."""
    model = models[family]
    for knobs in [{"do_sample": False}, *SAMPLED]:
        body = {"model": names[family], "text": PROMPT, "max_new_tokens": 8, **knobs}
        answer = client.post("/api/generate", json=body)
        assert answer.status_code == 200, answer.text
        found = answer.json()
        prompt = [token["id"] for token in found["prompt"]]
        assert found["ids"] == generated(model, prompt, {"max_new_tokens": 8, **knobs})
        assert found["tokens"] == [step["text"] for step in found["steps"]]
        assert [step["token"] for step in found["steps"]] == found["ids"]
    config = model.config
    ids = prompt + found["ids"]
    step = found["steps"][3]
    with torch.inference_mode():
        full = model(torch.tensor([ids[: step["position"]]]), output_attentions=True)
    probabilities = torch.softmax(full.logits[0, -1].float(), dim=-1)
    top = probabilities.topk(10)
    softmax = step["funnel"][0]
    assert softmax["name"] == "softmax" and softmax["ids"] == top.indices.tolist()
    assert torch.allclose(torch.tensor(softmax["probabilities"]), top.values, rtol=0, atol=pass_tolerance(config))
    rows = torch.stack([weights[0, :, -1] for weights in full.attentions])  # [layer, head, key]
    assert torch.allclose(rows_of(step), rows, rtol=0, atol=pass_tolerance(config))
    assert [stage["name"] for stage in step["funnel"]] == ["softmax", "temperature", "top_k", "top_p"]
    assert step["draw"]["how"] == "race" and step["draw"]["token"] == step["token"]
    kv_heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = config.hidden_size // config.num_attention_heads
    cached = step["position"]  # every token before the one written: the new one is read at the next step
    assert (
        step["cache_bytes"]
        == config.num_hidden_layers * 2 * kv_heads * cached * getattr(config, "head_dim", head_dim) * 4
    )


def test_the_stream_is_the_answer_and_a_follower_by_id_gets_every_token_once_in_order(client):
    body = {"text": PROMPT, "max_new_tokens": 10, **SAMPLED[0]}
    answer = client.post("/api/generate", json=body).json()
    streamed = client.post("/api/generate/stream", json=body)
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    found = events(streamed.text)
    assert [name for name, _ in found] == ["writing"] + ["step"] * 10 + ["done"]
    put_together = {**found[0][1], **found[-1][1], "steps": [data for _, data in found[1:-1]]}
    assert put_together == answer
    followed = events(client.get(f"/api/generate/{answer['writing_id']}/stream").text)
    assert followed == found
    assert client.get("/api/generate/aaaaaaaaaaaaaaaaaaaaaaaaaa/stream").status_code == 404


def test_followers_after_the_end_read_the_kept_steps_and_after_eviction_it_is_written_again(client, caplog):
    """A class's phones that follow a writing after it ended: each gets every step once and in order, the stream
    as its writer got it, and the lab writes it no second time (its log says when it writes one from its spec);
    the kept steps' bytes are the run cache's, in the budget. Let go as a run is, it is written again from its
    spec: the same tokens."""
    body = {"text": "Late phones follow the cat. The cat", "max_new_tokens": 12, **SAMPLED[1]}
    logged = lambda writing_id: [  # noqa: E731
        record for record in caplog.records if record.getMessage().startswith(f"writing {writing_id}:")
    ]
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        written = events(client.post("/api/generate/stream", json=body).text)
        writing_id = written[0][1]["writing_id"]
        url = f"/api/generate/{writing_id}/stream"
        with ThreadPoolExecutor(6) as phones:
            followed = list(phones.map(lambda _: events(client.get(url).text), range(6)))
        assert client.post("/api/generate", json=body).json()["ids"] == written[-1][1]["ids"]
        assert len(logged(writing_id)) == 1
        assert [data["index"] for name, data in written if name == "step"] == list(range(12))
        assert all(one == written for one in followed)
        lab = client.app.state.lab
        kept = lab.runs.get(kept_key(writing_id))
        rows = sum(len(data["attention"]["data"]) for name, data in written if name == "step")
        assert rows < kept.nbytes < 20 * rows and lab.runs.nbytes >= kept.nbytes
        while lab.runs.let_go_oldest():  # as the budget lets the cache's oldest entries go where work needs room
            pass
        again = events(client.get(url).text)
        assert len(logged(writing_id)) == 2
    tokens = lambda found: [(data["index"], data["token"]) for name, data in found if name == "step"]  # noqa: E731
    assert tokens(again) == tokens(written) and again[-1] == written[-1]


async def followed_as_served(app, url: str, on_step) -> list[str]:
    """GET `url` of the app as a server calls it (ASGI, the client's leaving listened for), the body's events as
    they are sent; `on_step(n)` is awaited as the nth step's event is sent, and where it says True the client
    leaves then (http.disconnect), as a phone closing the page does."""
    left, asked, sent = asyncio.Event(), False, []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": url,
        "raw_path": url.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.9", 40001),
        "server": ("testserver", 80),
    }

    async def receive() -> dict:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        await asyncio.sleep(0)  # the server's write: the client's leaving is heard here
        if message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"].decode())
            if sent[-1].startswith("event: step") and await on_step(sum(e.startswith("event: step") for e in sent)):
                left.set()

    await app(scope, receive, send)
    return sent


def test_a_kept_writing_is_held_in_the_budget_while_a_follower_reads_it_and_given_back_when_it_leaves(client):
    """A follower of a writing that ended reads its kept steps as a request reads a run: their bytes held in the
    lab's budget from its first event to its last, once however many follow at once, still held when the cache
    lets the writing go meanwhile, and given back when the stream ends, or when the follower leaves halfway."""
    body = {"text": "Held while the phones read. The cat", "max_new_tokens": 6, **SAMPLED[1]}
    written = events(client.post("/api/generate/stream", json=body).text)
    url = f"/api/generate/{written[0][1]['writing_id']}/stream"
    lab = client.app.state.lab
    budget, nbytes = lab.budget, lab.runs.get(kept_key(written[0][1]["writing_id"])).nbytes
    assert budget.reading == 0

    async def follow_two_then_one_who_leaves() -> tuple[list, list, list, list, int]:
        reading, second = [], []

        async def on_step(count: int) -> bool:
            reading.append(budget.reading)
            if count == 2:  # a second phone reads the whole writing meanwhile
                second.extend(await followed_as_served(client.app, url, lambda _: reading_now(second_reading)))
            if count == 3:  # the cache lets the writing go meanwhile: still held for this follower
                while lab.runs.let_go_oldest():
                    pass
            return False

        second_reading: list[int] = []

        async def reading_now(into: list) -> bool:
            into.append(budget.reading)
            return False

        first = await followed_as_served(client.app, url, on_step)
        after_first = budget.reading
        # The cache let it go: rewritten for the next follower; kept again, and this one leaves at its second step.
        await followed_as_served(client.app, url, lambda _: reading_now([]))
        left_reading = []

        async def leave_at_two(count: int) -> bool:
            left_reading.append(budget.reading)
            return count == 2

        left = await followed_as_served(client.app, url, leave_at_two)
        return first, second, reading + second_reading, left, [after_first, budget.reading], left_reading

    first, second, reading, left, after, left_reading = client.portal.call(follow_two_then_one_who_leaves)
    assert reading == [nbytes] * 12 and after == [0, 0]
    streamed = [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in written]
    assert first[1:] == streamed and second[1:] == streamed  # after the retry line: every event, as written
    # The server hears the client leave at its next write: a step or so more may go before the stream ends.
    assert 2 <= len(left_reading) < 6 and set(left_reading) == {nbytes}
    assert not any(event.startswith("event: done") for event in left)


@pytest.fixture(scope="module")
def classroom(client) -> tuple[str, dict]:
    """One class for the module's questions (a client starts a few an hour): its URL and the teacher's header."""
    started = client.post("/api/classes").json()
    return f"/api/classes/{started['code']}", {"X-Class-Secret": started["secret"]}


ELSEWHERE = {"X-Forwarded-For": "192.0.2.7"}  # a client on another machine, behind the lab's trusted proxy
DECODERS = {"zstd": lambda body: zstandard.ZstdDecompressor().decompressobj().decompress(body), "br": brotli.decompress}


def sent(client, method: str, url: str, headers: dict, **kwargs) -> tuple:
    """A stream's headers and its body as sent, not decoded."""
    with client.stream(method, url, headers=headers, **kwargs) as response:
        assert response.status_code == 200
        return response.headers, b"".join(response.iter_raw())


@pytest.mark.parametrize("encoding", ["zstd", "br"])
def test_the_stream_goes_plain_to_this_machine_and_compressed_elsewhere(client, encoding):
    """Each event carries a step's rows: the stream compresses them itself, off the event loop, for a client
    elsewhere, and sends them plain to one on this machine, past the compression middleware (app.web.writing)."""
    body = {"text": PROMPT, "max_new_tokens": 6, **SAMPLED[1]}
    accepts = {"Accept-Encoding": f"{encoding}, gzip"}
    headers, plain = sent(client, "POST", "/api/generate/stream", accepts, json=body)
    assert "content-encoding" not in headers
    found = events(plain.decode())
    assert [name for name, _ in found] == ["writing"] + ["step"] * 6 + ["done"]
    headers, packed = sent(client, "POST", "/api/generate/stream", {**accepts, **ELSEWHERE}, json=body)
    assert headers["content-encoding"] == encoding and headers["vary"] == "Accept-Encoding"
    assert len(packed) < len(plain) / 1.5
    assert DECODERS[encoding](packed) == plain
    url = f"/api/generate/{found[0][1]['writing_id']}/stream"
    headers, followed = sent(client, "GET", url, {**accepts, **ELSEWHERE})
    assert headers["content-encoding"] == encoding and DECODERS[encoding](followed) == plain
    headers, followed = sent(client, "GET", url, accepts)
    assert "content-encoding" not in headers and followed == plain
    # The other answers still go compressed by the middleware, to this machine too.
    assert client.post("/api/generate", json=body, headers=accepts).headers["content-encoding"] == encoding


def test_bounds_are_refused_naming_them(client, names):
    def refused(**body) -> str:
        answer = client.post("/api/generate", json={"text": PROMPT, **body})
        assert answer.status_code == 422, answer.text
        streamed = client.post("/api/generate/stream", json={"text": PROMPT, **body})
        assert streamed.status_code == 422 and streamed.json() == answer.json()
        return answer.json()["detail"]

    assert "ATTENTION_LAB_MAX_NEW_TOKENS" in refused(max_new_tokens=MOST + 1)
    assert "temperature" in refused(temperature=0)
    assert "top_p" in refused(top_p=1.5)
    assert "top_k" in refused(top_k=-1)
    assert "read at most 64 tokens" in refused(text="cat " * 60, max_new_tokens=MOST)
    detail = refused(model=names["minilm"])
    assert "reads and does not write" in detail and "ATTENTION_LAB_MODELS" in detail


def test_a_request_leaves_the_process_rng_alone(client):
    before = torch.random.get_rng_state()
    assert client.post("/api/generate", json={"text": PROMPT, **SAMPLED[1]}).status_code == 200
    assert torch.equal(torch.random.get_rng_state(), before)  # bit for bit: no rounding (a generator's state)


@pytest.fixture(scope="module")
def writings(folders, tmp_path_factory) -> Writings:
    return Writings(make_lab(load_model(folders["gpt2"]), tmp_path_factory.mktemp("writings")), MOST)


def test_a_follower_joins_the_writing_under_way_and_the_last_to_leave_calls_it_off(writings):
    """Two clients of one writing: the second joins after the first's first token (the gate held meanwhile, so
    that the writing is still under way) and gets every token once, in order. Then a writing whose one client
    leaves after two tokens stops there."""
    lab = writings.lab

    async def follow_two() -> tuple[list, list, int]:
        spec = await writings.spec(None, PROMPT, Knobs(max_new_tokens=12, do_sample=True, seed=3))
        first, second = [], []
        async with writings.follow(spec, Client("127.0.0.2")) as events:
            async for name, data in events:
                first.append((name, data))
                if len(first) == 2:  # the first token: the writing waits at the gate while the second joins
                    async with lab.gate.admit(Client("127.0.0.9")):
                        joined = writings._live[spec.run_id]
                        reading = asyncio.ensure_future(collect(writings, spec, Client("127.0.0.3"), second))
                        while joined.followers < 2:
                            await asyncio.sleep(0.01)
        await reading
        return first, second, len(joined.writer.steps)

    first, second, steps = run_async(follow_two())
    assert second == first and steps == 12
    assert [data["index"] for name, data in first if name == "step"] == list(range(12))

    async def leave() -> tuple[int, bool]:
        spec = await writings.spec(None, PROMPT, Knobs(max_new_tokens=MOST, do_sample=False))
        async with writings.follow(spec, Client("127.0.0.4")) as events:
            async with lab.gate.admit(Client("127.0.0.9")):  # the writing waits for its next step's turn
                live = writings._live[spec.run_id]
                async for name, _ in events:
                    if name == "step":
                        break
        await asyncio.wait([live.task])
        return len(live.writer.steps), live.task.cancelled()

    steps, cancelled = run_async(leave())
    assert cancelled and 1 <= steps < MOST and not writings._live


def test_a_writing_gives_the_model_up_after_its_step_under_way_when_someone_waits(writings, monkeypatch):
    """A writing's steps follow one another on the model's thread while nobody else waits for it: a learner who
    comes to the gate meanwhile gets the model once the step under way has ended, not at the end of the writing's
    turn (ALONE_SECONDS). Each step is slowed to 20 ms, so a turn left at its time bound would be a dozen steps."""
    lab, step = writings.lab, Writing.step

    def slow_step(writer):
        time.sleep(0.02)
        return step(writer)

    monkeypatch.setattr(Writing, "step", slow_step)

    async def a_learner_during_the_writing() -> tuple[int, int, int]:
        spec = await writings.spec(None, PROMPT, Knobs(max_new_tokens=MOST, do_sample=False))
        async with writings.follow(spec, Client("127.0.0.2")) as events:
            async for name, _ in events:
                if name == "step":
                    break
            live = writings._live[spec.run_id]
            asked = len(live.writer.steps)
            async with lab.gate.admit(Client("127.0.0.8")):
                admitted = len(live.writer.steps)
            async for _ in events:
                pass
        return asked, admitted, len(live.writer.steps)

    asked, admitted, written = run_async(a_learner_during_the_writing())
    assert written == MOST and admitted < MOST
    assert admitted - asked <= 1, f"the learner waited for {admitted - asked} steps"


async def collect(writings: Writings, spec, client: Client, into: list) -> None:
    async with writings.follow(spec, client) as events:
        async for event in events:
            into.append(event)


def test_a_step_asked_while_the_writing_is_under_way_is_read_from_it(writings, caplog):
    """A class asked about step 5 while the teacher's writing has written one token (the gate held meanwhile): the
    question follows that writing, waits for its step 5 and is answered with it, and no second writing starts."""
    lab = writings.lab

    async def ask_under_way() -> tuple[list, tuple]:
        spec = await writings.spec(None, PROMPT, Knobs(max_new_tokens=12, do_sample=True, seed=5))
        teacher = []
        async with writings.follow(spec, Client("127.0.0.2")) as events:
            async for event in events:
                teacher.append(event)
                if len(teacher) == 2:  # the first token: the writing waits at the gate while the class asks
                    async with lab.gate.admit(Client("127.0.0.9")):
                        live = writings._live[spec.run_id]
                        asked = asyncio.ensure_future(writings.step_at(spec, 5, Client("127.0.0.3")))
                        async with asyncio.timeout(30):  # a question that writes again waits for the gate for ever
                            while live.followers < 2:
                                await asyncio.sleep(0.01)
        return teacher, await asked

    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        teacher, (step, words, ids) = run_async(ask_under_way())
    assert started_writings(caplog) == 1
    steps = [data for name, data in teacher if name == "step"]
    assert len(steps) == 12 and step == steps[5]
    assert words == PROMPT + steps[4]["written"]
    assert ids == [token["id"] for token in teacher[0][1]["prompt"]] + [data["token"] for data in steps[:5]]


def test_a_browser_writes_at_once_as_many_as_it_may_have_waiting_and_others_are_untouched(writings):
    lab = writings.lab
    bound = lab.gate.max_waiting_per_client
    one, other = Client("127.0.0.5", "browser"), Client("127.0.0.6")

    async def crowd() -> str:
        specs = [await writings.spec(None, PROMPT, Knobs(max_new_tokens=3, seed=seed)) for seed in range(bound + 2)]
        async with lab.gate.admit(Client("127.0.0.9")):  # nothing is written meanwhile: all are under way
            started = [asyncio.ensure_future(collect(writings, spec, one, [])) for spec in specs[:bound]]
            while writings._by_client[one] < bound:
                await asyncio.sleep(0.01)
            with pytest.raises(TooManyWaiting) as refused:
                async with writings.follow(specs[bound], one):
                    pass
            started.append(asyncio.ensure_future(collect(writings, specs[bound + 1], other, [])))
            while writings._by_client[other] < 1:
                await asyncio.sleep(0.01)
        await asyncio.gather(*started)
        return str(refused.value)

    said = run_async(crowd())
    assert f"already have {bound} writings under way" in said and "ATTENTION_LAB_MAX_WAITING_PER_CLIENT" in said
    assert not writings._live and not writings._by_client and not writings._by_address


@pytest.mark.parametrize("knobs", [{"do_sample": False}, SAMPLED[1]], ids=["greedy", "sampled"])
def test_a_class_asked_which_token_comes_next_is_answered_by_the_steps_funnel(client, knobs, classroom):
    """Before a step, the class votes on the step's likeliest candidates; the reveal gives each its probability at
    the funnel's last stage (what the token was drawn from: the funnel test_writing holds to transformers' own
    processors), the likeliest as the answer and the token drawn. The words so far go to every screen at once."""
    writing = {"text": PROMPT, "max_new_tokens": 8, **knobs}
    steps = client.post("/api/generate", json=writing).json()["steps"]
    classes, teacher = classroom
    index = 3
    asked = client.post(
        f"{classes}/question", json={"kind": "written", "writing": writing, "index": index}, headers=teacher
    )
    assert asked.status_code == 201, asked.text
    question = asked.json()
    assert question["kind"] == "written" and question["phase"] == "open"
    assert question["words"] == PROMPT + steps[index - 1]["written"]
    assert question["answer"] is None and question["values"] is None and question["drawn"] is None
    revealed = client.post(f"{classes}/question/reveal", headers=teacher).json()
    last = steps[index]["funnel"][-1]
    chances = dict(zip(last["tokens"], last["probabilities"], strict=True))
    offered = [token for token, chance in zip(last["tokens"], last["probabilities"], strict=True) if chance > 0][:6]
    labels = [choice["label"] for choice in revealed["choices"]]
    assert sorted(labels) == sorted(shown(token) for token in offered)
    by_label = {shown(token): chances[token] for token in offered}
    assert revealed["values"] == [by_label[label] for label in labels]
    assert revealed["answer"]["value"] == max(revealed["values"]) == last["probabilities"][0]
    assert labels[revealed["drawn"]] == shown(steps[index]["text"])
    if not knobs["do_sample"]:
        assert revealed["drawn"] == revealed["answer"]["choice"]
        assert question["text"].startswith("Which token does the model write next")
    asking = lambda index: client.post(  # noqa: E731
        f"{classes}/question", json={"kind": "written", "writing": writing, "index": index}, headers=teacher
    )
    assert asking(8).status_code == 404 and "steps are 0 to 7" in asking(8).json()["detail"]


def started_writings(caplog) -> int:
    """The writings the lab has started from a spec (it logs each one)."""
    return sum(record.getMessage().startswith("writing ") for record in caplog.records)


def test_a_class_asked_about_a_kept_writing_reads_its_step_and_after_eviction_writes_it_again(
    client, classroom, caplog
):
    """The teacher's writing ended and is kept: asked which token comes next at its step 4, the class is answered
    from that step as the stream showed it (its funnel's last stage, the token it drew, the words before it) and
    the lab writes nothing. Let go as a run is, the step is written again from the spec: the same question."""
    writing = {"text": "The class asks about the cat. The cat", "max_new_tokens": 9, **SAMPLED[1]}
    classes, teacher = classroom
    index = 4

    def asked_and_revealed() -> tuple[dict, dict]:
        body = {"kind": "written", "writing": writing, "index": index}
        asked = client.post(f"{classes}/question", json=body, headers=teacher)
        assert asked.status_code == 201, asked.text
        return asked.json(), client.post(f"{classes}/question/reveal", headers=teacher).json()

    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        written = events(client.post("/api/generate/stream", json=writing).text)
        assert started_writings(caplog) == 1
        question, revealed = asked_and_revealed()
        assert started_writings(caplog) == 1
        lab = client.app.state.lab
        while lab.runs.let_go_oldest():  # as the budget lets the cache's oldest entries go where work needs room
            pass
        question_again, revealed_again = asked_and_revealed()
        assert started_writings(caplog) == 2
    steps = [data for name, data in written if name == "step"]
    step, last = steps[index], steps[index]["funnel"][-1]
    assert question["words"] == writing["text"] + steps[index - 1]["written"]
    # Each choice's value: the token's probability at the last stage (the race's too, where it drew a rarer one).
    race = zip(step["draw"]["tokens"], step["draw"]["probabilities"], strict=True)
    last_stage = zip(last["tokens"], last["probabilities"], strict=True)
    by_label = {shown(token): chance for token, chance in [*race, *last_stage] if chance > 0}
    labels = [choice["label"] for choice in revealed["choices"]]
    assert revealed["values"] == [by_label[label] for label in labels]
    assert revealed["answer"]["value"] == last["probabilities"][0]
    assert labels[revealed["drawn"]] == shown(step["text"])
    same = lambda answer: {key: answer[key] for key in ("text", "words", "choices", "values", "answer", "drawn")}  # noqa: E731
    assert same(question_again) == same(question) and same(revealed_again) == same(revealed)


def test_the_shipped_writing_plan_is_asked_and_answered_on_a_tiny_decoder(client, classroom):
    """static/lessons/write.json, step by step, on the tiny GPT-2 this module serves (the lab ships no decoder):
    each question answered by its writing's step, the greedy ones by the token written; a temperature question by
    the temperatures it names."""
    plan = json.loads((ROOT / "static" / "lessons" / "write.json").read_text())
    assert plan["requires"] and "model" not in plan  # no one model: what it needs, said in words
    classes, teacher = classroom
    for step in plan["steps"]:
        asked = step["question"]
        writing = {"text": step["view"]["text"], **asked["writing"]}
        steps = client.post("/api/generate", json=writing).json()["steps"]
        body = {key: value for key, value in asked.items() if key != "writing"} | {"writing": writing}
        assert client.post(f"{classes}/question", json=body, headers=teacher).status_code == 201
        revealed = client.post(f"{classes}/question/reveal", headers=teacher).json()
        written = steps[asked["index"]]
        if asked["kind"] == "temperature":
            temperatures = [f"temperature {temperature:g}" for temperature in asked["temperatures"]]
            assert [choice["label"] for choice in revealed["choices"]] == temperatures
            assert revealed["answer"]["value"] == max(revealed["values"])
            continue
        assert revealed["answer"]["value"] == written["funnel"][-1]["probabilities"][0]
        assert revealed["choices"][revealed["drawn"]]["label"] == shown(written["text"])
        if not asked["writing"]["do_sample"]:
            assert revealed["drawn"] == revealed["answer"]["choice"]


def test_a_class_asked_which_temperature_makes_a_token_likelier_is_answered_by_transformers(client, models, classroom):
    """At step 2 of a sampled writing, of the likeliest token (likelier at temperature 0.2) and of the third: each
    value is transformers' TemperatureLogitsWarper on a full pass over the words so far, the answer the larger."""
    writing = {"text": PROMPT, "max_new_tokens": 6, **SAMPLED[0]}
    answer = client.post("/api/generate", json=writing).json()
    classes, teacher = classroom
    ids = [token["id"] for token in answer["prompt"]] + answer["ids"][:2]
    with torch.inference_mode():
        logits = models["gpt2"](torch.tensor([ids])).logits[:, -1].float()
    for rank in [0, 2]:
        body = {"kind": "temperature", "writing": writing, "index": 2, "rank": rank}
        asked = client.post(f"{classes}/question", json=body, headers=teacher)
        assert asked.status_code == 201, asked.text
        assert asked.json()["words"] == PROMPT + answer["steps"][1]["written"]
        revealed = client.post(f"{classes}/question/reveal", headers=teacher).json()
        token = answer["steps"][2]["funnel"][0]["ids"][rank]
        assert [choice["label"] for choice in revealed["choices"]] == ["temperature 0.2", "temperature 1.5"]
        expected = []
        for value, temperature in zip(revealed["values"], [0.2, 1.5], strict=True):
            warped = TemperatureLogitsWarper(temperature)(torch.tensor([ids]), logits.clone())
            expected.append(float(torch.softmax(warped, dim=-1)[0, token]))
            assert value == pytest.approx(expected[-1], abs=pass_tolerance(models["gpt2"].config) / temperature)
        assert revealed["answer"]["choice"] == expected.index(max(expected))
        if rank == 0:
            assert revealed["answer"]["label"] == "temperature 0.2"
