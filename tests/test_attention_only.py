"""A model of a family the lab has no adapter for (tiny random OPT and ELECTRA folders: tests/families.py)
opens in an attention-only lab: its weights are transformers' output_attentions, the views that read only
them work, and every view that needs an adapter answers 422 with the reason."""

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.engine.model import load_model
from app.main import create_app
from app.web.encoding import decode_attention
from tests.families import build
from tests.float32 import largest, pass_tolerance, tolerance

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module", params=["opt", "electra"])
def attention_only(request, tmp_path_factory):
    loaded = load_model(build(request.param, tmp_path_factory.mktemp(request.param)))
    with TestClient(create_app(loaded)) as client:
        yield request.param, loaded, client


def test_the_model_says_what_it_has(attention_only):
    name, loaded, client = attention_only
    model = client.get("/api/model").json()
    reason = f"no adapter for the {name!r} family: attention weights only"
    assert model["attention_only"] == reason and model["family"] == name
    assert model["capabilities"] == dict.fromkeys(model["capabilities"], False) and len(model["capabilities"]) == 6
    assert (model["layers"], model["heads"]) == (2, 4)
    # Whether it reads causally is what its weights show: OPT's are zero above the diagonal, ELECTRA's are not.
    assert model["decoder"] == (name == "opt")
    assert model["masks"] == [model["default_mask"]] == (["causal"] if name == "opt" else ["bidirectional"])
    assert model["token_types"] == (name == "electra") and model["score_notes"] == []


@pytest.mark.parametrize("pair", [None, "A quick fox!"])
def test_its_weights_are_transformers_own(attention_only, pair):
    name, loaded, client = attention_only
    body = client.post("/api/analyze", json={"text": TEXT, "text_pair": pair}).json()
    encoding = loaded.tokenizer(TEXT, pair, return_token_type_ids=True)
    assert [token["id"] for token in body["tokens"]] == encoding["input_ids"]
    inputs = {"input_ids": torch.tensor([encoding["input_ids"]])}
    if name == "electra":
        inputs["token_type_ids"] = torch.tensor([encoding["token_type_ids"]])
    with torch.no_grad():
        reference = loaded.model(**inputs, output_attentions=True)
    got = client.get(f"/api/runs/{body['run_id']}/attention", params={"dtype": "float32"})
    expected = np.stack([weights[0].numpy() for weights in reference.attentions])
    config = loaded.model.config
    np.testing.assert_allclose(decode_attention(got.content, got.headers), expected, atol=pass_tolerance(config))
    last = reference.last_hidden_state[0].numpy()
    pooled = last[-1] if name == "opt" else last.mean(0)
    np.testing.assert_allclose(body["pooled"]["vector"], pooled, atol=pass_tolerance(config, largest(last)))


def test_the_views_of_weights_alone_work(attention_only):
    name, loaded, client = attention_only
    run = client.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
    stats = client.get(f"/api/runs/{run}/head-stats")
    assert stats.status_code == 200 and len(stats.json()["heads"]) == 8
    rollout = client.get(f"/api/runs/{run}/tokens/2/rollout")
    shares = rollout.json()["rollout"]  # a product of a share matrix per block: sums of every key's share
    assert rollout.status_code == 200 and sum(shares) == pytest.approx(1, abs=tolerance(2 * len(shares)))
    grid = client.get(f"/api/runs/{run}/attention", params={"size": 8})
    assert grid.status_code == 200 and grid.headers["X-Attention-Shape"].startswith("2,4,")


def test_every_view_that_needs_an_adapter_says_why(attention_only):
    name, loaded, client = attention_only
    run = client.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
    reason = f"no adapter for the {name!r} family: attention weights only"
    refused = [
        client.get(f"/api/runs/{run}/layers/0/heads/1"),
        client.get(f"/api/runs/{run}/layers/0/heads/1/queries/2"),
        client.get(f"/api/runs/{run}/layers/1"),
        client.get(f"/api/runs/{run}/embeddings"),
        client.get(f"/api/runs/{run}/tokens/2"),
        client.get(f"/api/runs/{run}/attention", params={"measure": "norm"}),
        client.get(f"/api/runs/{run}/attention", params={"measure": "alti_rollout"}),
        client.post("/api/analyze", json={"text": TEXT, "ablate": [[0, 1]]}),
    ]
    for answer in refused:
        assert answer.status_code == 422 and reason in answer.json()["detail"], answer.text
