"""Growing a model through the lab's API, on one lab process (`python -m app`) with a data folder of its own:
the induction recipe from {}, one training at a time, a learner's analyze beside a training, the bounds, the
teacher's rule in a class, pause and resume against the session's uninterrupted run of the recipe in the engine
(tests/grown.py), the grown model in every request, and SIGTERM keeping the last checkpoint."""

import json
import time

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.engine.training.spec import TrainingSpec
from app.main import create_app
from app.settings import get_settings
from tests.class_client import device
from tests.conftest import LabProcess
from tests.float32 import pass_tolerance

SMALL = {"steps": 60, "checkpoint_every": 20}  # about 3 s of training


@pytest.fixture(scope="module")
def lab(tmp_path_factory, request):
    data = tmp_path_factory.mktemp("training-data")
    env = {"ATTENTION_LAB_DATA_DIR": str(data), "ATTENTION_LAB_CLASS_STARTS_PER_HOUR": "1000"}
    process = LabProcess(tmp_path_factory.mktemp("training-lab"), env=env)
    process.data = data
    seen = process.launch()
    request.getfixturevalue("grown_recipe")  # grown on one core (once a session) while the lab starts on the other
    process.wait_started(seen)
    yield process
    if process.process.poll() is None:
        process.stop()


def status(lab, train_id: str) -> dict:
    answer = httpx.get(f"{lab.url}/api/train/{train_id}", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def until(lab, train_id: str, done, timeout: float = 120) -> dict:
    """The training's status once `done(status)` holds."""
    deadline = time.monotonic() + timeout
    while not done(found := status(lab, train_id)):
        assert time.monotonic() < deadline, found["state"]
        assert found["state"] != "failed", found["error"]
        time.sleep(0.1)
    return found


def ended(found: dict) -> bool:
    return found["state"] != "running"


def test_the_empty_spec_grows_the_induction_recipe_beside_a_learners_analyze_and_one_training_at_a_time(lab):
    teacher, learner = device("127.0.0.1"), device("127.0.0.2")
    started = teacher.post(f"{lab.url}/api/train", json={})
    assert started.status_code == 200, started.text
    recipe = started.json()
    assert recipe["train_id"] == TrainingSpec().train_id and recipe["state"] == "running"
    assert recipe["spec"] == json.loads(TrainingSpec().canonical())["training"]
    assert 0 < recipe["memory_bytes"] < 64 * 1024**2

    other = teacher.post(f"{lab.url}/api/train", json={"seed": 1})
    assert other.status_code == 409 and recipe["train_id"] in other.json()["detail"]
    again = teacher.post(f"{lab.url}/api/train", json={})  # the same spec is the same training, under way
    assert again.status_code == 200 and again.json()["train_id"] == recipe["train_id"]

    until(lab, recipe["train_id"], lambda found: found["step"] >= 30)
    waits = []
    for n in range(6):  # texts never analyzed before: each a pass at the model, between the training's slices
        asked = time.monotonic()
        answer = learner.post(f"{lab.url}/api/analyze", json={"text": f"The river bank {n} was steep after the rain."})
        waits.append(time.monotonic() - asked)
        assert answer.status_code == 200, answer.text
    during = status(lab, recipe["train_id"])
    assert during["state"] == "running", "the analyses must have run beside the training"
    assert max(waits) <= 2.0, waits

    stranger = learner.post(f"{lab.url}/api/train/{recipe['train_id']}/cancel")
    assert stranger.status_code == 403
    cancelled = teacher.post(f"{lab.url}/api/train/{recipe['train_id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    found = status(lab, recipe["train_id"])
    assert found["step"] >= 30 and len(found["losses"]) == found["step"] and found["checkpoints"]
    assert found["model"] == found["checkpoints"][-1]["model"]
    scores = found["checkpoints"][-1]["scores"]
    assert len(scores["previous"]) == 2 and len(scores["copying"][0]) == 2 and len(scores["conditions"]) == 3


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"steps": 20_001}, "ATTENTION_LAB_MAX_TRAIN_STEPS"),
        ({"layers": 12, "hidden": 1024, "heads": 16}, "ATTENTION_LAB_MAX_TRAIN_WEIGHTS"),
        ({"batch": 1024, "length": 32}, "ATTENTION_LAB_MAX_TRAIN_BATCH_TOKENS"),
        ({"hidden": 128, "heads": 4, "attention_only": False, "batch": 512}, "ATTENTION_LAB_MAX_TRAIN_WEIGHT_TOKENS"),
        ({"data": "text", "text": "word " * 50_000}, "ATTENTION_LAB_MAX_TRAIN_TEXT_BYTES"),
        ({"hidden": 66, "heads": 4}, "hidden: 66 is not a multiple of heads"),
        ({"layers": 13}, "layers"),
        ({"shape": "huge"}, "shape"),
    ],
)
def test_a_spec_past_a_bound_answers_422_naming_it(lab, spec, named):
    answer = httpx.post(f"{lab.url}/api/train", json=spec, timeout=30)
    assert answer.status_code == 422 and named in answer.text, answer.text


def test_while_a_class_runs_only_its_teacher_starts_pauses_and_resumes_a_training(lab):
    teacher, learner = device("127.0.0.1"), device("127.0.0.3")
    started = teacher.post(f"{lab.url}/api/classes")
    assert started.status_code == 201
    code, secret = started.json()["code"], started.json()["secret"]
    try:
        spec = {**SMALL, "seed": 7}
        for body, headers in (
            (spec, {}),
            ({**spec, "class_code": code}, {}),
            ({**spec, "class_code": code}, {"X-Class-Secret": "not the secret"}),
        ):
            refused = learner.post(f"{lab.url}/api/train", json=body, headers=headers)
            assert refused.status_code == 403, refused.text
        assert httpx.get(f"{lab.url}/api/train", timeout=30).json()["active"] is None
        mine = learner.post(
            f"{lab.url}/api/train", json={**spec, "class_code": code}, headers={"X-Class-Secret": secret}
        )
        assert mine.status_code == 200 and mine.json()["class_code"] == code
        train_id = mine.json()["train_id"]
        assert learner.post(f"{lab.url}/api/train/{train_id}/pause").status_code == 200  # its starter may
        paused = until(lab, train_id, ended)
        assert paused["state"] == "paused"
        # from the teacher's own page (another browser): the class's secret
        assert device("127.0.0.4").post(f"{lab.url}/api/train/{train_id}/resume").status_code == 403
        resumed = device("127.0.0.4").post(f"{lab.url}/api/train/{train_id}/resume", headers={"X-Class-Secret": secret})
        assert resumed.status_code == 200 and resumed.json()["state"] == "running"
        assert learner.post(f"{lab.url}/api/train/{train_id}/cancel").json()["state"] == "cancelled"
    finally:
        teacher.delete(f"{lab.url}/api/classes/{code}", headers={"X-Class-Secret": secret})


@pytest.fixture(scope="module")
def paused_and_resumed(lab):
    """The recipe's first 75 steps as a training of their own, paused twice on its way and resumed each time, to
    its end."""
    client = device("127.0.0.5")
    spec = {"steps": 75, "checkpoint_every": 25}
    train_id = client.post(f"{lab.url}/api/train", json=spec).json()["train_id"]
    pauses = []
    for least in (10, 35):
        until(lab, train_id, lambda found, least=least: found["step"] >= least)
        paused = client.post(f"{lab.url}/api/train/{train_id}/pause").json()
        assert paused["state"] == "paused"
        pauses.append(paused["step"])
        assert client.post(f"{lab.url}/api/train/{train_id}/resume").json()["state"] == "running"
    return TrainingSpec.of(**spec), pauses, until(lab, train_id, ended)


def test_a_training_paused_and_resumed_in_the_lab_ends_with_the_uninterrupted_runs_weights(
    paused_and_resumed, grown_recipe
):
    """Its steps are the recipe's first 75 (the same seed, batches and learning rates): the session's
    uninterrupted recipe has its weights at each of its checkpoints."""
    spec, pauses, found = paused_and_resumed
    assert found["state"] == "done" and all(0 < step < spec.steps for step in pauses), pauses
    uninterrupted = grown_recipe.trainer
    # the checkpoints are named by their weights' digest: the same names are the same weights, bit for bit
    assert [c["model"] for c in found["checkpoints"]] == [c["model"] for c in uninterrupted.checkpoints[:4]]
    assert found["losses"] == uninterrupted.losses[:75]


def test_the_grown_model_is_served_in_every_request_and_writes_what_transformers_writes(lab, paused_and_resumed):
    _, _, found = paused_and_resumed
    name = found["model"]
    listed = httpx.get(f"{lab.url}/api/models", timeout=30).json()["models"]
    assert name in [model["name"] for model in listed]
    text = "ba be bi bo ba be bi"
    run = httpx.post(f"{lab.url}/api/analyze", json={"text": text, "model": name}, timeout=60)
    assert run.status_code == 200, run.text
    run = run.json()
    assert run["model"]["name"] == name and run["model"]["layers"] == 2 and run["model"]["heads"] == 2
    last = len(run["tokens"]) - 1
    answer = httpx.get(f"{lab.url}/api/runs/{run['run_id']}/tokens/{last}/next?k=5", timeout=30)
    assert answer.status_code == 200, answer.text
    candidates = answer.json()["candidates"]

    folder = lab.data / "models" / name
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    assert [token["id"] for token in run["tokens"]] == ids[0].tolist()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1].double()
    probabilities = torch.softmax(logits, -1).numpy()
    best = np.argsort(-probabilities)[:5]
    assert [c["id"] for c in candidates][:2] == best[:2].tolist()
    np.testing.assert_allclose([c["probability"] for c in candidates], probabilities[best], atol=1e-5)
    assert [c["token"] for c in candidates][:2] == [tokenizer.decode([i]) for i in best[:2]]


def test_what_a_head_attends_to_asked_on_a_checkpoint_is_that_checkpoints_attention(lab, paused_and_resumed):
    """An "attends" question asked of a run on an early checkpoint's model: its values are the row that
    checkpoint's folder gives transformers (output_attentions), not the latest checkpoint's."""
    _, _, found = paused_and_resumed
    early, latest = found["checkpoints"][0]["model"], found["checkpoints"][-1]["model"]
    text = "ba be bi bo ba be bi"
    run = httpx.post(f"{lab.url}/api/analyze", json={"text": text, "model": early}, timeout=60)
    assert run.status_code == 200, run.text
    run = run.json()
    layer, head, token = 1, 0, len(run["tokens"]) - 1
    teacher = device("127.0.0.1")
    started = teacher.post(f"{lab.url}/api/classes").json()
    code, secret = started["code"], {"X-Class-Secret": started["secret"]}
    try:
        body = {"kind": "attends", "run_id": run["run_id"], "token": token, "layer": layer, "head": head}
        asked = teacher.post(f"{lab.url}/api/classes/{code}/question", json=body, headers=secret)
        assert asked.status_code == 201, asked.text
        assert [choice["token"] for choice in asked.json()["choices"]] == list(range(token + 1))  # causal: no later key
        revealed = teacher.post(f"{lab.url}/api/classes/{code}/question/reveal", headers=secret).json()
    finally:
        teacher.delete(f"{lab.url}/api/classes/{code}", headers=secret)

    def row(name: str) -> tuple[np.ndarray, object]:
        folder = lab.data / "models" / name
        model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
        ids = AutoTokenizer.from_pretrained(folder)(text, return_tensors="pt")["input_ids"]
        assert ids[0].tolist() == [t["id"] for t in run["tokens"]]
        with torch.no_grad():
            attentions = model(input_ids=ids, output_attentions=True).attentions
        return attentions[layer][0, head, token, : token + 1].double().numpy(), model.config

    expected, config = row(early)
    tolerance = pass_tolerance(config)
    np.testing.assert_allclose(revealed["values"], expected, rtol=0, atol=tolerance)
    assert revealed["answer"]["choice"] == int(np.argmax(expected))
    assert np.abs(row(latest)[0] - expected).max() > 100 * tolerance, "the two checkpoints must attend apart"


def test_sigterm_stops_a_training_with_its_last_checkpoint_kept_and_it_resumes_after_a_restart(lab):
    client = device("127.0.0.6")
    spec = {"steps": 2000, "checkpoint_every": 25, "seed": 11}
    started = client.post(f"{lab.url}/api/train", json=spec)
    assert started.status_code == 200, started.text
    train_id = started.json()["train_id"]
    until(lab, train_id, lambda found: len(found["checkpoints"]) >= 2)
    lab.stop()  # SIGTERM
    folder = lab.data / "trainings" / train_id
    saved = json.loads((folder / "state.json").read_text())
    assert saved["state"] == "stopped" and saved["error"] is None
    resume = torch.load(folder / "resume.pt", weights_only=True)
    assert resume["step"] == saved["record"]["step"] >= saved["record"]["checkpoints"][-1]["step"] >= 25
    assert not (lab.data / "trainings" / "active.json").exists()
    kept = saved["record"]["checkpoints"][-1]["model"]
    AutoModelForCausalLM.from_pretrained(lab.data / "models" / kept)  # whole: it loads

    lab.start()
    found = status(lab, train_id)
    assert found["state"] == "stopped" and found["step"] == resume["step"] and found["model"] == kept
    going = client.post(f"{lab.url}/api/train/{train_id}/resume").json()
    assert going["state"] == "running"
    until(lab, train_id, lambda found: found["step"] > resume["step"])
    assert client.post(f"{lab.url}/api/train/{train_id}/cancel").json()["state"] == "cancelled"


def test_a_trainings_events_give_its_whole_status_then_its_end(lab, paused_and_resumed):
    """GET /api/train/{id}/events of a training that is done: its status, then "end"; an unknown training 404."""
    _, _, found = paused_and_resumed
    events = []
    with httpx.stream("GET", f"{lab.url}/api/train/{found['train_id']}/events", timeout=30) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    assert [kind for kind, _ in events] == ["training", "end"]
    assert events[0][1]["checkpoints"] == found["checkpoints"] and events[1][1]["state"] == "done"
    assert httpx.get(f"{lab.url}/api/train/{'a' * 26}/events", timeout=30).status_code == 404


def test_which_head_will_become_the_induction_head_is_asked_before_it_forms_and_answered_only_after(lab):
    """A class question about the recipe's training (cancelled early by the first test: no head yet): its
    choices are the model's four heads, and its reveal waits for an induction head (409 until then)."""
    teacher = device("127.0.0.1")
    started = teacher.post(f"{lab.url}/api/classes").json()
    code, secret = started["code"], {"X-Class-Secret": started["secret"]}
    try:
        asked = teacher.post(f"{lab.url}/api/classes/{code}/question", json={"kind": "grown_head"}, headers=secret)
        assert asked.status_code == 201, asked.text
        question = asked.json()
        assert question["view"] == {"train_id": TrainingSpec().train_id} and question["answer"] is None
        assert [choice["label"] for choice in question["choices"]] == ["head 0.0", "head 0.1", "head 1.0", "head 1.1"]
        early = teacher.post(f"{lab.url}/api/classes/{code}/question/reveal", headers=secret)
        assert early.status_code == 409 and "no induction head yet" in early.json()["detail"], early.text
        unknown = {"kind": "grown_head", "train_id": "a" * 26}
        assert teacher.post(f"{lab.url}/api/classes/{code}/question", json=unknown, headers=secret).status_code == 404
    finally:
        teacher.delete(f"{lab.url}/api/classes/{code}", headers=secret)


def marked_step(checkpoints: list[dict]) -> int | None:
    """The step the held-out in-context loss has fallen half way from its plateau (its highest value before its
    lowest) to its lowest, once it has fallen a nat: the phase change as docs/training.md defines it."""
    losses = [checkpoint["scores"]["in_context_loss"] for checkpoint in checkpoints]
    lowest = int(np.argmin(losses))
    plateau = max(losses[: lowest + 1])
    if plateau - losses[lowest] < 1.0:
        return None
    top = losses.index(plateau)
    half = plateau - (plateau - losses[lowest]) / 2
    return next(checkpoints[i]["step"] for i in range(top, lowest + 1) if losses[i] <= half)


def test_when_the_loss_will_drop_is_asked_before_the_phase_change_and_answered_by_the_range_holding_it(
    lab, grown_recipe
):
    """The recipe's training called off on its plateau (the session's, as a lab that grew it that far keeps it:
    tests/grown.py), asked about, then resumed to its phase change: a learner's vote on a range of its steps, 409
    on a reveal before the loss drops, and after it the range holding the step its checkpoints' in-context losses
    mark."""
    teacher, phone = device("127.0.0.1"), device("127.0.0.7")
    recipe = TrainingSpec()
    grown_recipe.in_lab(lab.data, grown_recipe.plateau_step, "cancelled")
    before = status(lab, recipe.train_id)
    assert before["state"] == "cancelled" and before["phase_change"] is None
    assert marked_step(before["checkpoints"]) is None
    started = teacher.post(f"{lab.url}/api/classes").json()
    code, secret = started["code"], {"X-Class-Secret": started["secret"]}
    classes = f"{lab.url}/api/classes/{code}"
    try:
        asked = teacher.post(f"{classes}/question", json={"kind": "loss_drop"}, headers=secret)
        assert asked.status_code == 201, asked.text
        question = asked.json()
        assert question["text"] == "When will the loss drop?" and question["answer"] is None
        assert question["view"] == {"train_id": recipe.train_id}
        quarter = recipe.steps // 4  # the recipe's 600 steps in four ranges of 150
        ranges = [(n * quarter + 1, (n + 1) * quarter) for n in range(4)]
        assert [choice["label"] for choice in question["choices"]] == [f"steps {a}–{b}" for a, b in ranges]
        learner = phone.post(f"{classes}/learners", json={}).json()["learner"]
        vote = {"question": question["id"], "round": 1, "choice": 1}
        assert phone.put(f"{classes}/learners/{learner}/vote", json=vote).status_code == 200
        early = teacher.post(f"{classes}/question/reveal", headers=secret)
        assert early.status_code == 409 and "loss has not dropped yet" in early.json()["detail"], early.text

        resumed = teacher.post(f"{lab.url}/api/train/{recipe.train_id}/resume", headers=secret)
        assert resumed.status_code == 200 and resumed.json()["state"] == "running", resumed.text
        until(lab, recipe.train_id, lambda found: found["phase_change"] is not None)
        paused = teacher.post(f"{lab.url}/api/train/{recipe.train_id}/pause", headers=secret)
        assert paused.status_code == 200, paused.text
        found = until(lab, recipe.train_id, ended)
        again = teacher.post(f"{classes}/question", json={"kind": "loss_drop"}, headers=secret)
        assert again.status_code == 409 and "dropped already" in again.json()["detail"], again.text

        revealed = teacher.post(f"{classes}/question/reveal", headers=secret)
        assert revealed.status_code == 200, revealed.text
        answer = revealed.json()["answer"]
        step = marked_step(found["checkpoints"])
        assert step is not None and found["phase_change"]["step"] == step
        holding = next(n for n, (a, b) in enumerate(ranges) if a <= step <= b)
        assert answer["choice"] == holding and answer["label"] == f"steps {ranges[holding][0]}–{ranges[holding][1]}"
        assert answer["value"] == step and answer["right"] == [holding]
        score = phone.get(f"{classes}/learners/{learner}/score").json()
        assert (score["right"], score["asked"]) == (int(holding == 1), 1), score
    finally:
        teacher.post(f"{lab.url}/api/train/{recipe.train_id}/cancel", headers=secret)
        teacher.delete(classes, headers=secret)


def test_a_lab_whose_lifespan_ends_without_a_signal_stops_its_training_at_once_with_its_state_saved(
    tiny, tmp_path, monkeypatch
):
    """An ASGI server (or a test's client) may end the lifespan without SIGTERM: the training under way stops at
    its next slice and saves its state, as on a signal, instead of holding the stop for its close's 10 s."""
    monkeypatch.setenv("ATTENTION_LAB_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    with TestClient(create_app(tiny)) as client:
        train_id = client.post("/api/train", json={"steps": 2000, "seed": 12}).json()["train_id"]
        deadline = time.monotonic() + 60
        while client.get(f"/api/train/{train_id}").json()["step"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stopping = time.monotonic()
    waited = time.monotonic() - stopping
    get_settings.cache_clear()
    saved = json.loads((tmp_path / "trainings" / train_id / "state.json").read_text())
    assert saved["state"] == "stopped" and saved["error"] is None and saved["record"]["step"] >= 3
    assert waited < 5
