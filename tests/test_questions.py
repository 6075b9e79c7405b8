"""A class question's choices and answer, as the class API gives them, against an independent computation:
NumPy over transformers' output_attentions for weights and for each head's pattern shares, NumPy over the
attention endpoint's float32 numbers (tested against the papers' formulas in test_measures) for norm, ALTI
and rollout and for the causal mask, and transformers' own logits for the next token. Nothing of the
answer shows before the reveal."""

import math
import unicodedata

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.engine.model import load_model
from app.engine.questions import loss_drop
from app.main import create_app
from app.settings import get_settings
from app.web.encoding import decode_attention
from tests.families import build
from tests.float32 import largest, pass_tolerance

pytestmark = pytest.mark.slow

TEXT = "The bank of the river was steep."
PAIR = "The bank lent money."
# Quick teacher moves: every ask and reveal of this module comes from one class.
SETTINGS = {"ATTENTION_LAB_CLASS_ACTIONS_PER_SECOND": "1000"}


class ClassLab:
    """A lab on a model, with a class started: ask() asks a question and returns its state."""

    def __init__(self, client: TestClient, loaded):
        self.client, self.loaded = client, loaded
        started = client.post("/api/classes").json()
        self.code, self.teacher = started["code"], {"X-Class-Secret": started["secret"]}

    def analyze(self, **body) -> dict:
        response = self.client.post("/api/analyze", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def ask(self, **body):
        return self.client.post(f"/api/classes/{self.code}/question", json=body, headers=self.teacher)

    def reveal(self) -> dict:
        response = self.client.post(f"/api/classes/{self.code}/question/reveal", headers=self.teacher)
        assert response.status_code == 200, response.text
        return response.json()

    def attention(self, run_id: str, measure: str) -> np.ndarray:
        """[layer, head, query, key] float32 from the attention endpoint."""
        got = self.client.get(f"/api/runs/{run_id}/attention", params={"measure": measure, "dtype": "float32"})
        assert got.status_code == 200, got.text
        return decode_attention(got.content, got.headers)


@pytest.fixture(scope="module")
def settings():
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SETTINGS.items():
            patch.setenv(name, value)
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()


def class_lab(loaded):
    with TestClient(create_app(loaded)) as client:
        yield ClassLab(client, loaded)


@pytest.fixture(scope="module")
def bert(settings, tiny):
    yield from class_lab(tiny)


@pytest.fixture(scope="module")
def family(settings, tmp_path_factory):
    """A tiny random model of a family (tests/families.py), served with a class."""
    made = {}

    def of(name: str) -> ClassLab:
        if name not in made:
            labs = class_lab(load_model(build(name, tmp_path_factory.mktemp(name))))
            made[name] = (labs, next(labs))
        return made[name][1]

    yield of
    for labs, _ in made.values():
        labs.close()


def reference(loaded, text, pair=None):
    """transformers' own pass: its tokens and every block's attention weights [head, query, key], float64."""
    encoding = loaded.tokenizer(text, pair, return_tensors="pt", return_token_type_ids=True)
    with torch.inference_mode():
        out = loaded.model(**encoding, output_attentions=True)
    return encoding, [a[0].double().numpy() for a in out.attentions]


def view_row(blocks, tokens, token, layer=0, head=0, heads=(), block_mean=False, per_block=False, **filters):
    """The row the page draws (static/js/matrix.js), from [layer][head, query, key] numbers: float32 means
    summed in float64, sinks blanked (and the rest rescaled), a segment filter, the causal mask."""
    layers = range(len(blocks)) if block_mean else [layer]
    chosen = [0] if per_block else (list(heads) if head == "mean" else [head])
    means = [np.asarray(blocks[index])[chosen].astype(np.float64).mean(0).astype(np.float32) for index in layers]
    matrix = np.stack(means).astype(np.float64).mean(0).astype(np.float32) if block_mean else means[0]
    row = matrix[token].astype(np.float64)
    added = np.array([t["added"] for t in tokens])
    if filters.get("sinks", "show") != "show":
        if filters["sinks"] == "renormalise":
            row = row / row[~added].sum()
        row[added] = np.nan
    if filters.get("segments", "all") != "all":
        row[np.array([t["segment"] != filters["segments"][1] for t in tokens])] = np.nan
    if filters.get("causal"):
        row[np.arange(len(tokens)) > token] = np.nan
    return row


def check_answer(lab: ClassLab, asked: dict, row: np.ndarray):
    """The question offers exactly the keys the row keeps, and reveals the largest of them, exactly."""
    assert asked["answer"] is None and asked["correct"] is None and asked["phase"] == "open"
    assert [choice["token"] for choice in asked["choices"]] == [int(i) for i in np.flatnonzero(~np.isnan(row))]
    revealed = lab.reveal()
    best = int(np.nanargmax(row))
    answer = revealed["answer"]
    assert asked["choices"][answer["choice"]]["token"] == best
    # a weight, or its share of the row's kept weights: its own error, and its sum's relative to the sum
    atol = pass_tolerance(lab.loaded.model.config)
    assert math.isclose(answer["value"], row[best], rel_tol=atol, abs_tol=atol)
    assert answer["label"] == asked["choices"][answer["choice"]]["label"]


WEIGHT_VIEWS = [
    {"layer": 1, "head": 2},
    {"layer": 0, "head": "mean", "heads": [1, 3]},
    {"block_mean": True, "head": 3},
    {"block_mean": True, "head": "mean", "heads": [0, 1, 2, 3]},
    {"layer": 1, "head": 0, "sinks": "hide"},
    {"layer": 1, "head": 1, "sinks": "renormalise"},
    {"layer": 0, "head": 2, "segments": "AB"},
    {"layer": 1, "head": 3, "segments": "BB", "sinks": "renormalise"},
]


@pytest.mark.parametrize("view", WEIGHT_VIEWS, ids=lambda view: "-".join(f"{k}={v}" for k, v in view.items()))
def test_an_attends_question_on_the_weights_is_answered_as_transformers_attends(bert, view):
    run = bert.analyze(text=TEXT, text_pair=PAIR)
    token = next(
        t["index"] for t in run["tokens"] if t["segment"] == view.get("segments", "BA")[0] and t["text"] == "bank"
    )
    _, attentions = reference(bert.loaded, TEXT, PAIR)
    asked = bert.ask(kind="attends", run_id=run["run_id"], token=token, **view)
    assert asked.status_code == 201, asked.text
    check_answer(bert, asked.json(), view_row(attentions, run["tokens"], token, **view))


@pytest.mark.parametrize("measure", ["norm", "alti", "alti_rollout"])
@pytest.mark.parametrize("view", [{"layer": 1, "head": 2}, {"block_mean": True, "head": "mean", "heads": [0, 2]}])
def test_an_attends_question_under_each_measure_is_answered_from_its_numbers(bert, measure, view):
    run = bert.analyze(text=TEXT)
    numbers = bert.attention(run["run_id"], measure)
    asked = bert.ask(kind="attends", run_id=run["run_id"], token=2, measure=measure, sinks="hide", **view)
    assert asked.status_code == 201, asked.text
    state = asked.json()
    assert state["measure"]["key"] == measure
    per_block = measure.startswith("alti")
    check_answer(bert, state, view_row(numbers, run["tokens"], 2, per_block=per_block, sinks="hide", **view))


def test_a_causal_view_offers_no_later_token(bert):
    run = bert.analyze(text=TEXT, mask="causal")
    numbers = bert.attention(run["run_id"], "weights")
    asked = bert.ask(kind="attends", run_id=run["run_id"], token=4, layer=1, head=1)
    assert asked.status_code == 201, asked.text
    check_answer(bert, asked.json(), view_row(numbers, run["tokens"], 4, layer=1, head=1, causal=True))


def test_a_sliding_window_offers_only_what_the_window_sees(family):
    lab = family("mistral")  # a window of 3 tokens in every block: a query sees itself and the 2 before it
    run = lab.analyze(text="The cat sat on the mat.")
    asked = lab.ask(kind="attends", run_id=run["run_id"], token=5, layer=0, head=1).json()
    assert [choice["token"] for choice in asked["choices"]] == [3, 4, 5]
    numbers = lab.attention(run["run_id"], "weights")
    row = view_row(numbers, run["tokens"], 5, layer=0, head=1, causal=True)
    row[:3] = np.nan
    check_answer(lab, asked, row)


def test_an_encoders_window_on_either_side_offers_only_what_it_sees(family):
    lab = family("modernbert")  # block 1 local: a query sees the keys fewer than 3 positions away, either side
    run = lab.analyze(text="The cat sat on the mat.")
    asked = lab.ask(kind="attends", run_id=run["run_id"], token=5, layer=1, head=2).json()
    assert [choice["token"] for choice in asked["choices"]] == [3, 4, 5, 6, 7]
    row = view_row(lab.attention(run["run_id"], "weights"), run["tokens"], 5, layer=1, head=2)
    row[np.abs(np.arange(len(row)) - 5) >= 3] = np.nan
    check_answer(lab, asked, row)


def test_a_class_asks_of_a_model_without_an_adapter_what_its_weights_answer(family):
    """OPT (no adapter): its weights answer an attends question and a head question; a measure cannot."""
    lab = family("opt")
    run = lab.analyze(text=TEXT)
    _, attentions = reference(lab.loaded, TEXT)
    asked = lab.ask(kind="attends", run_id=run["run_id"], token=4, layer=1, head=0)
    assert asked.status_code == 201, asked.text
    check_answer(lab, asked.json(), view_row(attentions, run["tokens"], 4, layer=1, head=0, causal=True))
    head = lab.ask(kind="head", run_id=run["run_id"], layer=0, pattern="previous")
    assert head.status_code == 201, head.text
    shares = np.diagonal(attentions[0], offset=-1, axis1=1, axis2=2).mean(-1)
    assert lab.reveal()["answer"]["choice"] == int(np.argmax(shares))
    refused = lab.ask(kind="attends", run_id=run["run_id"], token=4, layer=1, head=0, measure="alti")
    assert refused.status_code == 422 and "no adapter for the 'opt' family" in refused.json()["detail"]


def test_duplicate_tokens_are_told_apart_by_position(bert):
    run = bert.analyze(text="the bank and the bank.")
    asked = bert.ask(kind="attends", run_id=run["run_id"], token=2, layer=0, head=0).json()
    labels = [choice["label"] for choice in asked["choices"]]
    assert labels == ["[CLS]", "the #1", "bank #2", "and", "the #4", "bank #5", ".", "[SEP]"]
    assert asked["text"] == "Which token does “bank #2” attend to most in block 0, head 0?"
    bert.reveal()


@pytest.mark.parametrize("pattern", ["previous", "next", "self", "cls", "sep", "period"])
def test_a_head_question_is_answered_by_each_heads_share_of_the_pattern(bert, pattern):
    run = bert.analyze(text=TEXT, text_pair=PAIR)
    encoding, attentions = reference(bert.loaded, TEXT, PAIR)
    weights = attentions[1]  # [head, query, key]
    ids = encoding["input_ids"][0].tolist()
    keys = {
        "cls": np.array([i == 0 for i in range(len(ids))]),
        "sep": np.array([i > 0 and s is None for i, s in enumerate(encoding.sequence_ids(0))]),
        "period": np.array([bert.loaded.tokenizer.convert_ids_to_tokens(i) == "." for i in ids]),
    }
    offsets = {"previous": -1, "next": 1, "self": 0}
    if pattern in offsets:
        shares = np.diagonal(weights, offset=offsets[pattern], axis1=1, axis2=2).mean(-1)
    else:
        shares = weights[:, :, keys[pattern]].sum(-1).mean(-1)
    asked = bert.ask(kind="head", run_id=run["run_id"], layer=1, pattern=pattern)
    assert asked.status_code == 201, asked.text
    state = asked.json()
    assert [choice["head"] for choice in state["choices"]] == [0, 1, 2, 3]
    assert [choice["label"] for choice in state["choices"]] == ["head 0", "head 1", "head 2", "head 3"]
    answer = bert.reveal()["answer"]
    assert answer["choice"] == int(np.argmax(shares))
    assert math.isclose(answer["value"], shares.max(), abs_tol=pass_tolerance(bert.loaded.model.config))


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_next_token_question_offers_the_lm_heads_best_and_answers_its_most_probable(family, name):
    lab = family(name)
    text = "The cat sat on the"
    run = lab.analyze(text=text)
    token = len(run["tokens"]) - 1
    encoding = lab.loaded.tokenizer(text, return_tensors="pt")
    with torch.inference_mode():
        logits = lab.loaded.model(**encoding).logits[0, token].double()
    probabilities = torch.softmax(logits, -1).numpy()
    best = np.argsort(-logits.numpy(), kind="stable")[:6]
    # As a person reads each piece; one holding part of a character's bytes keeps its own spelling, and a control
    # byte, which draws nothing, is spelled by its byte.
    tokenizer = lab.loaded.tokenizer
    spelled = lambda text: "".join(  # noqa: E731
        f"<0x{ord(c):02X}>" if unicodedata.category(c) == "Cc" and not c.isspace() else c for c in text
    ).strip()
    words = [
        tokenizer.convert_ids_to_tokens(int(i)) if "\ufffd" in tokenizer.decode([i]) else spelled(tokenizer.decode([i]))
        for i in best
    ]
    first = lab.ask(kind="next_token", run_id=run["run_id"], token=token).json()
    assert sorted(choice["label"] for choice in first["choices"]) == sorted(words)
    again = lab.ask(kind="next_token", run_id=run["run_id"], token=token).json()
    assert [c["label"] for c in again["choices"]] == [c["label"] for c in first["choices"]]  # a fixed order
    answer = lab.reveal()["answer"]
    assert answer["label"] == words[0]
    atol = pass_tolerance(lab.loaded.model.config, largest(logits))  # half the logits' error at most
    assert math.isclose(answer["value"], probabilities[best[0]], abs_tol=atol)


def test_questions_a_run_cannot_answer_are_refused(bert):
    run = bert.analyze(text=TEXT, text_pair=PAIR)["run_id"]
    no_lm_head = bert.ask(kind="next_token", run_id=run, token=1)
    assert no_lm_head.status_code == 422 and "no language-model head" in no_lm_head.json()["detail"]
    wrong_segment = bert.ask(kind="attends", run_id=run, token=1, segments="BA")
    assert wrong_segment.status_code == 422 and "segment A" in wrong_segment.json()["detail"]
    assert bert.ask(kind="attends", run_id=run, token=1, layer=9).status_code == 404
    assert bert.ask(kind="attends", run_id=run, token=1, head="mean", heads=[7]).status_code == 404
    assert bert.ask(kind="attends", run_id=run, token=1, measure="difference").status_code == 422
    assert bert.ask(kind="head", run_id=run, layer=0, pattern="sideways").status_code == 422
    assert bert.ask(kind="attends", run_id="nope", token=1).status_code == 404
    # The teacher sends what to ask, never the choices or the answer.
    assert bert.ask(kind="attends", run_id=run, token=1, choices=["a"], answer=0).status_code == 422


def test_nothing_of_the_answer_shows_before_the_reveal(bert):
    run = bert.analyze(text=TEXT)
    asked = bert.ask(kind="attends", run_id=run["run_id"], token=3, layer=1, head=2).json()
    snapshot = bert.client.get(f"/api/classes/{bert.code}").json()
    for state in (asked, snapshot["question"]):
        assert state["answer"] is None and state["correct"] is None and state["tallies"] == []
        assert state["values"] is None and state["ranks"] is None
        assert set(state) == {
            *("id", "kind", "test", "text", "step", "view", "measure", "choices", "phase", "round"),
            *("votes", "tallies", "answer", "correct", "values", "ranks", "ranked", "words", "drawn"),
        }
        assert all(set(choice) == {"index", "label", "token", "head", "document"} for choice in state["choices"])
    revealed = bert.reveal()
    assert bert.client.get(f"/api/classes/{bert.code}").json()["question"]["answer"] == revealed["answer"]


@pytest.mark.parametrize("by", ["position", "head"])
def test_a_patch_question_is_answered_by_the_patch_that_moves_a_furthest_towards_b(bert, by):
    """Each choice's value is its share of the way from A's output to B's, patched by hand with plain hooks on
    the transformers model (tests/test_patching.py's Reference)."""
    from tests.test_patching import Reference

    text, source = "the bank of the river", "the bank raised rates"
    run = bert.analyze(text=text)
    reference = Reference(bert.loaded.model, "bert", bert.loaded.model.config.num_attention_heads)
    a_ids = [token["id"] for token in run["tokens"]]
    b_ids = bert.loaded.tokenizer(source)["input_ids"]
    a, b = reference.output(a_ids), reference.output(b_ids)
    if by == "head":
        cells = [{"site": "head", "layer": 1, "head": h, "positions": [2], "sources": [2]} for h in range(4)]
    else:
        cells = [{"site": "resid_pre", "layer": 1, "head": None, "positions": [p], "sources": [p]} for p in range(6)]
    shares = [float((reference.patched(a_ids, b_ids, cell) @ b - a @ b) / (b @ b - a @ b)) for cell in cells]
    asked = bert.ask(
        kind="patch", run_id=run["run_id"], source=source, layer=1, by=by, token=2 if by == "head" else None
    )
    assert asked.status_code == 201, asked.text
    state = asked.json()
    assert state["kind"] == "patch" and "the bank raised rates" in state["text"]
    if by == "head":
        assert [choice["head"] for choice in state["choices"]] == [0, 1, 2, 3]
    else:
        assert [choice["label"] for choice in state["choices"]] == ["[CLS]", "the #1", "bank", "of", "the #4", "river"]
    answer = bert.reveal()["answer"]
    assert answer["choice"] == int(np.argmax(shares))
    # (x·b - a·b) / (b·b - a·b): two cosines' errors over the way from A to B
    atol = 2 * pass_tolerance(bert.loaded.model.config) * (1 + max(map(abs, shares))) / abs(float(b @ b - a @ b))
    assert answer["value"] == pytest.approx(max(shares), abs=atol)


def test_a_patch_question_needs_a_plain_run_and_a_b_that_differs(bert):
    plain = bert.analyze(text="the bank of the river")["run_id"]
    paired = bert.analyze(text="the bank of the river", text_pair="x")["run_id"]
    ask = {"kind": "patch", "source": "the bank raised rates", "layer": 0, "by": "position"}
    refused = bert.ask(**ask, run_id=paired)
    assert refused.status_code == 422 and "alone" in refused.json()["detail"]
    same = bert.ask(**{**ask, "source": "the bank of the river"}, run_id=plain)
    assert same.status_code == 422 and "same output" in same.json()["detail"]
    assert bert.ask(**{**ask, "layer": 9}, run_id=plain).status_code == 404


@pytest.mark.parametrize("steps", [600, 10, 7, 3])
def test_a_loss_drop_question_cuts_the_steps_into_ranges_and_is_answered_by_the_one_holding_the_step(steps):
    """Its ranges cover steps 1 to `steps` once each, in order (four, or one a step when fewer); at every step
    marked, the answer is the one range holding it; unmarked, no range is."""
    unmarked = loss_drop(steps)
    spans = []
    for choice in unmarked.choices:
        low, _, high = choice.label.removeprefix("steps ").removeprefix("step ").partition("–")
        spans.append(range(int(low), int(high or low) + 1))
    assert [step for span in spans for step in span] == list(range(1, steps + 1))
    assert len(spans) == min(4, steps) and all(choice.value == 0 for choice in unmarked.choices)
    for marked in range(1, steps + 1):
        question = loss_drop(steps, marked)
        holding = next(n for n, span in enumerate(spans) if marked in span)
        assert (question.answer, question.right) == (holding, (holding,))
        assert question.choices[holding].value == marked
