"""POST /api/analyze on an encoder-decoder served beside an encoder: a source and a target (given or written), the
three kinds of attention named by rows and columns and equal to transformers' eager pass, a clear 422 for a target
given to an encoder, and /api/models and /api/model saying each model's kind."""

import csv
import logging

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from app.engine.model import load_model
from app.main import create_app
from app.settings import get_settings
from app.web.schemas.encoder_decoder import EncoderDecoderResponse
from tests import families
from tests.float32 import tolerance

SOURCE = "The cat sat on the mat."
TARGET = "A quick brown fox jumps."


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {"bert": tmp_path_factory.mktemp("b") / "bert", "marian": tmp_path_factory.mktemp("m") / "marian"}
    families.bert(made["bert"])
    families.marian(made["marian"])
    return made


@pytest.fixture(scope="module")
def client(folders):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTENTION_LAB_MODELS", str(folders["marian"]))
        get_settings.cache_clear()
        with TestClient(create_app(load_model(folders["bert"]))) as test_client:
            yield test_client
    get_settings.cache_clear()


def test_the_models_say_their_kind(client):
    listed = {model["name"]: model["kind"] for model in client.get("/api/models").json()["models"]}
    assert listed == {"bert": "encoder", "marian": "encoder-decoder"}
    info = client.get("/api/model", params={"name": "marian"}).json()
    assert info["kind"] == "encoder-decoder" and info["attention_kinds"] == ["encoder", "decoder", "cross"]
    assert info["layers"] == 2 and info["decoder_layers"] == 3
    assert set(info["not_measured"]) == {"alti"}


@pytest.mark.parametrize("target", [TARGET, None], ids=["given", "written"])
def test_a_run_names_source_and_target_and_equals_transformers(client, folders, target):
    body = {"text": SOURCE, "model": "marian", **({"target": target} if target else {"max_new_tokens": 6})}
    answer = client.post("/api/analyze", json=body)
    assert answer.status_code == 200, answer.text
    run = answer.json()
    EncoderDecoderResponse.model_validate(run)  # the answer is what the schema (and /docs) says
    assert run["kind"] == "encoder-decoder" and run["target"]["written"] == (target is None)
    assert {token["segment"] for token in run["source"]["tokens"]} == {"source"}
    assert {token["segment"] for token in run["target"]["tokens"]} == {"target"}
    source_ids = [token["id"] for token in run["source"]["tokens"]]
    target_ids = [token["id"] for token in run["target"]["tokens"]]
    model = AutoModelForSeq2SeqLM.from_pretrained(folders["marian"], attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folders["marian"])
    assert source_ids == tokenizer(SOURCE)["input_ids"]
    if target is None:
        written = model.generate(torch.tensor([source_ids]), do_sample=False, num_beams=1, max_new_tokens=6)
        assert target_ids == written[0].tolist()
        assert run["target"]["text"] == tokenizer.decode(target_ids, skip_special_tokens=True)
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids]), output_attentions=True
        )
    expected = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    sizes = {"source": len(source_ids), "target": len(target_ids)}
    for kind, layers in expected.items():
        served = run["attention"][kind]
        weights = np.array(served["weights"])
        assert weights.shape == (len(layers), 4, sizes[served["rows"]], sizes[served["columns"]])
        np.testing.assert_allclose(weights, np.stack([layer[0].numpy() for layer in layers]), atol=tolerance(5 * 64))
        norm = np.array(served["norm"])
        assert norm.shape == weights.shape and (norm >= 0).all() and ((norm > 0) == (weights > 0)).all()
    assert run["attention"]["cross"]["rows"] == "target" and run["attention"]["cross"]["columns"] == "source"
    assert run["attention"]["cross"]["names"] == "decoder.blocks.L.cross_attn.weights"


def test_a_target_for_an_encoder_is_refused_in_a_sentence(client):
    answer = client.post("/api/analyze", json={"text": SOURCE, "target": TARGET})
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    assert "bert is an encoder (BERT)" in detail and "takes no `target`" in detail


def test_an_encoder_decoder_refuses_the_single_text_knobs_and_views(client):
    answer = client.post("/api/analyze", json={"text": SOURCE, "model": "marian", "text_pair": "a", "mask": "causal"})
    assert answer.status_code == 422 and "not `text_pair`, `mask`" in answer.json()["detail"]
    answer = client.post("/api/generate", json={"text": SOURCE, "model": "marian"})
    assert answer.status_code == 422 and "encoder-decoder" in answer.json()["detail"]


def test_the_export_names_source_and_target_in_every_row(client):
    run = client.post("/api/analyze", json={"text": SOURCE, "target": TARGET, "model": "marian"}).json()
    exported = client.get(f"/api/encoder-decoder/{run['run_id']}/export")
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
    lines = exported.text.splitlines()
    about = [row[0] for row in csv.reader(lines[:3])]  # comment lines, one cell each
    assert about == [
        "# model: marian (Marian, encoder-decoder, float32)",
        f"# source: {SOURCE}",
        f"# target (given): {TARGET}",
    ]
    rows = list(csv.DictReader(lines[3:]))
    tokens = {side: run[side]["tokens"] for side in ("source", "target")}
    cross = [row for row in rows if row["kind"] == "cross"]
    assert len(cross) == 3 * 4 * len(tokens["target"]) * len(tokens["source"])
    assert {(row["query segment"], row["key segment"]) for row in cross} == {("target", "source")}
    weights = np.array(run["attention"]["cross"]["weights"])
    for row in cross[:50]:
        layer, head, query, key = (int(row[name]) for name in ("layer", "head", "query", "key"))
        assert (
            row["query token"] == tokens["target"][query]["label"]
            and row["key token"] == tokens["source"][key]["label"]
        )
        assert float(row["weight"]) == pytest.approx(weights[layer, head, query, key], abs=1e-7)
    kinds = {row["kind"]: (row["query segment"], row["key segment"]) for row in rows}
    assert kinds == {"encoder": ("source", "source"), "decoder": ("target", "target"), "cross": ("target", "source")}
    as_json = client.get(f"/api/encoder-decoder/{run['run_id']}/export", params={"format": "json"}).json()
    assert (
        as_json["run_id"] == run["run_id"]
        and as_json["attention"]["cross"]["weights"] == run["attention"]["cross"]["weights"]
    )
    missing = client.get("/api/encoder-decoder/aaaaaaaaaaaaaaaaaaaaaaaaaa/export")
    assert missing.status_code == 404


def test_the_export_reads_the_kept_run_and_one_let_go_is_computed_again(client, caplog):
    """An export right after the analyze reads the run the lab keeps (its log says when it computes one from its
    spec: once here), its bytes counted in the run cache; let go as the budget lets runs go, the export computes it
    again: the same tokens, and numbers within float32's reach of the first pass's. A one-text view of its id says
    it holds no such run (404), not a 500."""
    body = {"text": "The export reads the kept run.", "max_new_tokens": 5, "model": "marian"}
    passes = lambda run_id: sum(  # noqa: E731
        record.getMessage() == f"encoder-decoder run {run_id}: a pass from its spec" for record in caplog.records
    )
    lab = client.app.state.lab
    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        run = client.post("/api/analyze", json=body).json()
        run_id = run["run_id"]
        kept = lab.runs.get(run_id)
        assert kept is not None and lab.runs.nbytes >= kept.nbytes > 0
        exported = client.get(f"/api/encoder-decoder/{run_id}/export", params={"format": "json"}).json()
        assert client.get(f"/api/encoder-decoder/{run_id}/export").status_code == 200
        assert passes(run_id) == 1 and exported == run
        assert client.get(f"/api/runs/{run_id}/head-stats").status_code == 404
        while lab.runs.let_go_oldest():
            pass
        again = client.get(f"/api/encoder-decoder/{run_id}/export", params={"format": "json"}).json()
        assert passes(run_id) == 2 and lab.runs.get(run_id) is not None
    assert again["source"] == run["source"] and again["target"] == run["target"]
    config = lab.models.loaded("marian").loaded.model.config
    terms = (config.encoder_layers + config.decoder_layers) * max(config.d_model, config.encoder_ffn_dim)
    for kind in ("encoder", "decoder", "cross"):
        for measure in ("weights", "norm"):
            first, second = (np.array(answer["attention"][kind][measure]) for answer in (run, again))
            magnitude = 1.0 if measure == "weights" else float(np.abs(first).max())
            np.testing.assert_allclose(second, first, rtol=0, atol=tolerance(terms, magnitude))
