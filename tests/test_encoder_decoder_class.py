"""An encoder-decoder in class: "which source token does this target token read most?" asked on a tiny Marian's run
through the class API, a teacher and three learners each on its own loopback address, its revealed numbers equal to
transformers' eager cross_attentions (and the norm-weighted attention computed from the raw weights); a question of
the wrong kind for its run refused in a sentence."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from tests import families
from tests.class_client import Listener, device, start_class
from tests.conftest import LabProcess
from tests.float32 import tolerance

pytestmark = pytest.mark.slow

SOURCE = "The cat sat on the mat."
TARGET = "A quick brown fox jumps."
ROOT = Path(__file__).parent.parent
ATOL = tolerance(5 * 64)  # five blocks (two encoder, three decoder) of 64-wide FFNs, as test_encoder_decoder_api


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    return families.build("marian", tmp_path_factory.mktemp("m") / "marian")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, tiny_model_dir, marian):
    env = {
        "ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir),
        "ATTENTION_LAB_MODELS": str(marian),
        "ATTENTION_LAB_CLASS_ACTIONS_PER_SECOND": "1000",
    }
    lab = LabProcess(tmp_path_factory.mktemp("pair-class"), env=env)
    lab.start()
    yield lab
    lab.stop()
    log = lab.log.read_text()
    assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def eager(marian):
    """transformers' own pass over the run's tokens: (output with attentions, model)."""
    model = AutoModelForSeq2SeqLM.from_pretrained(marian, attn_implementation="eager").eval()

    def run(source_ids: list[int], target_ids: list[int]):
        with torch.inference_mode():
            return model(
                input_ids=torch.tensor([source_ids]),
                decoder_input_ids=torch.tensor([target_ids]),
                output_attentions=True,
            )

    return run, model


def test_a_class_is_asked_which_source_token_a_target_token_reads_most(lab, eager):
    teacher = device("127.0.58.1")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    run = teacher.post(f"{lab.url}/api/analyze", json={"text": SOURCE, "target": TARGET, "model": "marian"}).json()
    source, target = run["source"]["tokens"], run["target"]["tokens"]
    learners = [device(f"127.0.58.{n}") for n in (2, 3, 4)]
    ids = [learner.post(f"{classes}/learners", json={"nickname": ""}).json()["learner"] for learner in learners]
    streams = [Listener(f"{classes}/events", f"127.0.58.{n}").wait_ready() for n in (2, 3, 4)]
    try:
        token, layer, head = 2, 1, 2
        asked = teacher.post(
            f"{classes}/question",
            json={"kind": "cross_attends", "run_id": run["run_id"], "token": token, "layer": layer, "head": head},
            headers=secret,
        )
        assert asked.status_code == 201, asked.text
        question = asked.json()
        assert question["kind"] == "cross_attends" and question["answer"] is None and question["values"] is None
        assert question["text"] == (
            f"The decoder, reading “{target[token]['label']}” to choose “{target[token + 1]['label']}”: which source "
            f"token does it read most in cross-attention, decoder block {layer}, head {head}?"
        )
        assert [choice["label"] for choice in question["choices"]] == [t["label"] for t in source]
        assert [choice["token"] for choice in question["choices"]] == list(range(len(source)))

        out = eager[0]([t["id"] for t in source], [t["id"] for t in target])
        row = out.cross_attentions[layer][0, head, token].double().numpy()
        best = int(np.argmax(row))
        right, wrong = best, (best + 1) % len(row)
        for stream in streams:
            seen, _ = stream.wait_for("question", where=lambda data: data["question"]["id"] == question["id"])
            assert seen["question"]["answer"] is None and seen["question"]["kind"] == "cross_attends"
        for learner, learner_id, choice in zip(learners, ids, [right, wrong, wrong], strict=True):
            body = {"question": question["id"], "round": 1, "choice": choice}
            assert learner.put(f"{classes}/learners/{learner_id}/vote", json=body).status_code == 200

        revealed = teacher.post(f"{classes}/question/reveal", headers=secret).json()
        np.testing.assert_allclose(revealed["values"], row, atol=ATOL)
        assert revealed["answer"]["choice"] == best and revealed["answer"]["label"] == source[best]["label"]
        assert revealed["tallies"] == [{str(right): 1, str(wrong): 2}]
        assert revealed["correct"] == [pytest.approx(1 / 3), None]
        assert revealed["measure"] == {"key": "weights", "symbol": "A[i,j]", "name": "attention weight"}
        for stream in streams:
            seen, _ = stream.wait_for("question", where=lambda data: data["question"]["phase"] == "revealed")
            assert seen["question"]["answer"] == revealed["answer"]
        scores = [learner.get(f"{classes}/learners/{i}/score").json() for learner, i in zip(learners, ids, strict=True)]
        assert [(score["right"], score["asked"]) for score in scores] == [(1, 1), (0, 1), (0, 1)]
    finally:
        for stream in streams:
            stream.close()


def test_a_mean_of_heads_hides_the_source_end_and_norm_is_the_papers(lab, eager):
    """Every block's heads 0 and 3 averaged, the source's end token hidden and the rest rescaled; and a head's
    norm-weighted attention, ‖α_ij f_h(x_j)‖ from the encoder's output and the cross-attention's W_V and W_O."""
    teacher = device("127.0.58.5")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    run = teacher.post(f"{lab.url}/api/analyze", json={"text": SOURCE, "target": TARGET, "model": "marian"}).json()
    source, target = run["source"]["tokens"], run["target"]["tokens"]
    run_eager, model = eager
    out = run_eager([t["id"] for t in source], [t["id"] for t in target])
    last = len(target) - 1
    body = {"kind": "cross_attends", "run_id": run["run_id"], "token": last, "head": "mean", "heads": [3, 0]}
    body |= {"block_mean": True, "sinks": "renormalise"}
    asked = teacher.post(f"{classes}/question", json=body, headers=secret)
    assert asked.status_code == 201, asked.text
    assert asked.json()["text"] == (
        f"The decoder, reading “{target[last]['label']}”: which source token does it read most in cross-attention, all "
        "3 decoder blocks averaged, heads 0, 3 averaged (the source's added tokens hidden, the rest rescaled)?"
    )
    kept = [index for index, t in enumerate(source) if not t["added"]]
    assert [choice["token"] for choice in asked.json()["choices"]] == kept and len(kept) == len(source) - 1
    revealed = teacher.post(f"{classes}/question/reveal", headers=secret).json()
    row = np.mean([layer[0, [0, 3], last].double().numpy() for layer in out.cross_attentions], axis=(0, 1))
    np.testing.assert_allclose(revealed["values"], row[kept] / row[kept].sum(), atol=2 * ATOL)
    assert revealed["measure"]["key"] == "weights" and revealed["measure"]["name"] != "attention weight"

    layer, head, token = 2, 1, 3
    body = {"kind": "cross_attends", "run_id": run["run_id"], "token": token, "layer": layer, "head": head}
    asked = teacher.post(f"{classes}/question", json=body | {"measure": "norm"}, headers=secret)
    assert asked.status_code == 201, asked.text
    assert "cross-attention, decoder block 2, head 1 (norm-weighted)?" in asked.json()["text"]
    revealed = teacher.post(f"{classes}/question/reveal", headers=secret).json()
    attention = model.model.decoder.layers[layer].encoder_attn
    d_head = attention.head_dim
    encoded = out.encoder_last_hidden_state[0].double()  # [source_pos, d_model]
    with torch.inference_mode():
        values = encoded @ attention.v_proj.weight.double().T + attention.v_proj.bias.double()
        moved = (
            values[:, head * d_head : (head + 1) * d_head]
            @ attention.out_proj.weight.double()[:, head * d_head : (head + 1) * d_head].T
        )
    norm = out.cross_attentions[layer][0, head, token].double() * moved.norm(dim=-1)
    np.testing.assert_allclose(revealed["values"], norm.numpy(), rtol=1e-5, atol=ATOL)
    assert revealed["answer"]["choice"] == int(norm.argmax())


def test_a_question_of_the_other_kind_for_its_run_is_refused_in_a_sentence(lab):
    teacher = device("127.0.58.6")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    pair = teacher.post(f"{lab.url}/api/analyze", json={"text": SOURCE, "target": TARGET, "model": "marian"}).json()
    one = teacher.post(f"{lab.url}/api/analyze", json={"text": SOURCE}).json()
    refused = teacher.post(
        f"{classes}/question", json={"kind": "attends", "run_id": pair["run_id"], "token": 1}, headers=secret
    )
    assert refused.status_code == 422 and "ask it `cross_attends`" in refused.json()["detail"]
    refused = teacher.post(
        f"{classes}/question", json={"kind": "cross_attends", "run_id": one["run_id"], "token": 1}, headers=secret
    )
    assert refused.status_code == 422 and "ask `attends` on this one" in refused.json()["detail"]
    outside = {"kind": "cross_attends", "run_id": pair["run_id"], "token": len(pair["target"]["tokens"])}
    refused = teacher.post(f"{classes}/question", json=outside, headers=secret)
    assert refused.status_code == 404 and "the decoder reads tokens 0 to" in refused.json()["detail"]
    refused = teacher.post(f"{classes}/question", json=outside | {"token": 0, "layer": 3}, headers=secret)
    assert refused.status_code == 404 and "decoder block 3 does not exist" in refused.json()["detail"]


def plan_js_list(name: str) -> list[str]:
    """A list of static/js/class/plan.js, as the planner reads a plan with it."""
    source = (ROOT / "static" / "js" / "class" / "plan.js").read_text()
    return re.findall(r'"([^"]+)"', re.search(rf"^(?:export )?const {name} = \[(.*?)\];", source, flags=re.M).group(1))


def test_the_alignment_plan_is_asked_on_a_tiny_marian_and_its_absent_model_is_said(lab, eager):
    """static/lessons/alignment.json: its model, absent here, refused with what to do; each step's view and question
    as the planner reads them, asked on the tiny Marian (its block cut to the tiny's last), each answer the argmax
    of transformers' cross-attention row averaged over the heads."""
    plan = json.loads((ROOT / "static" / "lessons" / "alignment.json").read_text())
    assert plan["format"] == "attention-lab lesson plan" and plan["requires"]
    teacher = device("127.0.58.7")
    absent = teacher.post(f"{lab.url}/api/analyze", json={"text": SOURCE, "model": plan["model"]})
    assert absent.status_code == 422
    assert f"`hf download {plan['model']}`" in absent.json()["detail"]
    assert f"start the lab with ATTENTION_LAB_MODELS={plan['model']}" in absent.json()["detail"]

    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    run_eager, model = eager
    last_block, heads = model.config.decoder_layers - 1, model.config.decoder_attention_heads
    for step in plan["steps"]:
        view, question = step["view"], step["question"]
        assert set(view) <= set(plan_js_list("STEP_KEYS")) and question["kind"] in plan_js_list("QUESTION_KINDS")
        assert view["kind"] == "cross" and question == {"kind": "cross_attends"}
        body = {"text": view["text"], "target": view["target"], "model": "marian"}
        run = teacher.post(f"{lab.url}/api/analyze", json=body).json()
        layer = min(view["layer"], last_block)
        ask = {"kind": "cross_attends", "run_id": run["run_id"], "token": view["token"], "layer": layer}
        ask |= {"head": "mean", "heads": list(range(heads)), "step": {"index": 1, "title": step["title"]}}
        asked = teacher.post(f"{classes}/question", json=ask, headers=secret)
        assert asked.status_code == 201, asked.text
        revealed = teacher.post(f"{classes}/question/reveal", headers=secret).json()
        out = run_eager(*([t["id"] for t in run[side]["tokens"]] for side in ("source", "target")))
        row = out.cross_attentions[layer][0, :, view["token"]].double().mean(0).numpy()
        np.testing.assert_allclose(revealed["values"], row, atol=ATOL)
        assert revealed["answer"]["choice"] == int(np.argmax(row))
