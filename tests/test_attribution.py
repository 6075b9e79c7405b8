"""Attribution of the bi-encoder similarity to the text's tokens, against independent computations:
sentence-transformers for the cosine, torch.autograd for gradient × input, and Integrated Gradients'
completeness (attributions sum to the output difference within the reported delta)."""

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from app.engine.model import packaged_model_path
from tests.float32 import largest, pass_terms, pass_tolerance, sum_tolerance, tolerance

pytestmark = pytest.mark.slow

TEXT, OTHER = "A man is playing a guitar on stage.", "Someone performs music with an instrument."


@pytest.fixture(scope="module")
def encoder():
    return SentenceTransformer(str(packaged_model_path()), device="cpu")


def own_cosine(minilm, rows, other_vector):
    """Mean pooling over the last block and the cosine, written out here: [1, pos, d] word rows -> scalar."""
    hidden = minilm.model(
        inputs_embeds=rows, token_type_ids=torch.zeros(rows.shape[:2], dtype=torch.long)
    ).last_hidden_state
    return torch.nn.functional.cosine_similarity(hidden[0].mean(0), other_vector, dim=0)


def completeness_tolerance(body) -> float:
    """The lab's delta is Σ attributions - (output - baseline output), a float32 sum of these terms."""
    return sum_tolerance([*body["attributions"], body["output"], body["baseline_output"]])


def backward_tolerance(config, grad, rows) -> float:
    """Gradient × input of each token: the gradient is a pass back through every block after the pass forward,
    and each token's attribution a sum over its row."""
    return tolerance(2 * pass_terms(config), float((grad * rows).abs().sum(-1).max()))


def test_integrated_gradients_is_complete_within_its_delta(client, encoder, minilm):
    body = client.post("/api/attribution", json={"text": TEXT, "other": OTHER, "steps": 64}).json()
    a, b = encoder.encode([TEXT, OTHER], normalize_embeddings=True)
    atol = pass_tolerance(minilm.model.config)  # cosines of the pass's last states
    assert body["output"] == pytest.approx(float(a @ b), abs=atol)
    ids = torch.tensor([[token["id"] for token in body["tokens"]]])
    with torch.no_grad():
        other = torch.tensor(encoder.encode([OTHER])[0])
        zero = own_cosine(minilm, torch.zeros(1, ids.shape[1], 384), other)
    assert body["baseline_output"] == pytest.approx(float(zero), abs=atol)
    total = sum(body["attributions"])
    assert total - (body["output"] - body["baseline_output"]) == pytest.approx(
        body["delta"], abs=completeness_tolerance(body)
    )
    assert abs(body["delta"]) < 0.05
    assert len(body["attributions"]) == len(body["tokens"]) == ids.shape[1]


def test_gradient_times_input_equals_autograd(client, encoder, minilm):
    body = client.post("/api/attribution", json={"text": TEXT, "other": OTHER, "method": "gradient_x_input"}).json()
    ids = torch.tensor([[token["id"] for token in body["tokens"]]])
    rows = minilm.model.get_input_embeddings()(ids).detach().requires_grad_(True)
    other = torch.tensor(encoder.encode([OTHER])[0])
    (grad,) = torch.autograd.grad(own_cosine(minilm, rows, other), rows)
    expected = (grad * rows).sum(-1)[0].detach().numpy()
    atol = backward_tolerance(minilm.model.config, grad.detach(), rows.detach())
    np.testing.assert_allclose(body["attributions"], expected, atol=atol)
    assert body["delta"] is None


def test_bad_attribution_requests_are_422(client):
    assert client.post("/api/attribution", json={"text": TEXT}).status_code == 422
    assert client.post("/api/attribution", json={"text": TEXT, "other": OTHER, "steps": 1}).status_code == 422
    assert client.post("/api/attribution", json={"text": TEXT, "other": OTHER, "method": "lime"}).status_code == 422


@pytest.fixture(scope="module", params=["gpt2", "llama", "gemma3"])
def decoder(request, tmp_path_factory):
    """A tiny random decoder with its LM head, and a lab serving it (Gemma 3: its rows scaled by √d_model, its
    logits soft-capped)."""
    from fastapi.testclient import TestClient

    from app.engine.model import load_model
    from app.main import create_app
    from tests.families import build

    loaded = load_model(build(request.param, tmp_path_factory.mktemp(request.param)))
    with TestClient(create_app(loaded)) as client:
        yield loaded, client


def own_logit(loaded, rows, token_id):
    """The LM head's logit of token_id after the last position, from the whole model's own forward."""
    return loaded.model(inputs_embeds=rows).logits[0, -1, token_id]


def test_the_next_token_logit_is_attributed_by_gradient_times_input(decoder):
    loaded, client = decoder
    text = "The cat sat on the"
    body = client.post(
        "/api/attribution", json={"text": text, "target": "next_token", "method": "gradient_x_input"}
    ).json()
    ids = torch.tensor([[token["id"] for token in body["tokens"]]])
    assert ids[0].tolist() == loaded.tokenizer(text)["input_ids"]
    with torch.no_grad():
        logits = loaded.model(ids).logits[0, -1]
    assert body["target"]["token_id"] == int(logits.argmax()) and body["target"]["position"] == ids.shape[1] - 1
    config = loaded.model.config
    assert body["output"] == pytest.approx(float(logits.max()), abs=pass_tolerance(config, largest(logits)))
    rows = loaded.model.get_input_embeddings()(ids).detach().requires_grad_()
    own_logit(loaded, rows, body["target"]["token_id"]).backward()
    expected = (rows.grad * rows).sum(-1)[0].detach().numpy()
    atol = backward_tolerance(config, rows.grad, rows.detach())
    np.testing.assert_allclose(body["attributions"], expected, atol=atol)


def test_integrated_gradients_of_a_chosen_next_token_is_complete(decoder):
    loaded, client = decoder
    body = client.post(
        "/api/attribution", json={"text": "A quick brown fox", "target": "next_token", "next_token": 7, "steps": 64}
    ).json()
    assert body["target"]["token_id"] == 7
    with torch.no_grad():
        zero = own_logit(loaded, torch.zeros(1, len(body["tokens"]), loaded.model.config.hidden_size), 7)
    assert body["baseline_output"] == pytest.approx(
        float(zero), abs=pass_tolerance(loaded.model.config, abs(float(zero)))
    )
    total = sum(body["attributions"])
    assert total - (body["output"] - body["baseline_output"]) == pytest.approx(
        body["delta"], abs=completeness_tolerance(body)
    )


def test_next_token_targets_need_an_lm_head_and_a_real_token(client, decoder):
    refused = client.post("/api/attribution", json={"text": TEXT, "target": "next_token"})
    assert refused.status_code == 422 and "no language-model head" in refused.json()["detail"]
    assert client.post("/api/attribution", json={"text": TEXT}).status_code == 422  # similarity needs `other`
    loaded, decoder_client = decoder
    vocab = loaded.model.config.vocab_size
    bad = decoder_client.post("/api/attribution", json={"text": TEXT, "target": "next_token", "next_token": vocab})
    assert bad.status_code == 422


def captum_ig(minilm, encoder, ids, steps: int, internal_batch_size: int | None):
    """Integrated Gradients of the cosine with OTHER's vector, from Captum called directly on the model's own
    forward (not the lab's), against an all-zero baseline: [pos] attributions and the delta."""
    from captum.attr import IntegratedGradients

    other = torch.tensor(encoder.encode([OTHER])[0])
    rows = minilm.model.get_input_embeddings()(ids).detach()

    def cosines(batch):
        hidden = minilm.model(
            inputs_embeds=batch, token_type_ids=torch.zeros(batch.shape[:2], dtype=torch.long)
        ).last_hidden_state
        return torch.nn.functional.cosine_similarity(hidden.mean(1), other[None], dim=-1)

    attributions, delta = IntegratedGradients(cosines).attribute(
        rows,
        baselines=torch.zeros_like(rows),
        n_steps=steps,
        internal_batch_size=internal_batch_size,
        return_convergence_delta=True,
    )
    return attributions[0].sum(-1).detach().numpy(), float(delta[0])


def test_integrated_gradients_in_slices_is_captums_own(client, encoder, minilm):
    """The lab computes IG a few steps per turn of the model (app.engine.attribution): its slices added up
    give what Captum gives in one call with the same batches of steps, and, to float32 rounding, what it
    gives with every step in one batch."""
    from app.engine.attribution import steps_per_slice

    text = " ".join(["A man is playing a guitar on stage while the crowd sings along."] * 2)
    ids = torch.tensor([[token["id"] for token in client.post("/api/analyze", json={"text": text}).json()["tokens"]]])
    per_slice = steps_per_slice(ids.shape[1])
    steps = 4 * per_slice + 1  # several slices, the last one shorter
    assert per_slice > 1
    body = client.post("/api/attribution", json={"text": text, "other": OTHER, "steps": steps}).json()
    assert [token["id"] for token in body["tokens"]] == ids[0].tolist()
    same_batches, delta = captum_ig(minilm, encoder, ids, steps, per_slice)
    np.testing.assert_allclose(body["attributions"], same_batches, rtol=0, atol=1e-7)
    assert body["delta"] == pytest.approx(delta, abs=1e-7)
    one_batch, delta = captum_ig(minilm, encoder, ids, steps, None)
    # Each attribution: passes forward and back at each step, the mean of the steps' gradients, then a row.
    atol = tolerance(2 * pass_terms(minilm.model.config) + steps, largest(one_batch))
    np.testing.assert_allclose(body["attributions"], one_batch, rtol=0, atol=atol)
    assert body["delta"] == pytest.approx(delta, abs=atol * len(one_batch))


def test_integrated_gradients_past_its_cost_bound_is_422_saying_the_bound(client, monkeypatch):
    """steps × tokens is bounded (ATTENTION_LAB_MAX_ATTRIBUTION_STEP_TOKENS: 65,536 by default, 256 steps at
    the 256 tokens MiniLM's pooling reads, which tests/test_heavy_work.py runs): past it a request is refused
    before any work, saying the bound."""
    experiments = client.app.state.experiments
    assert experiments.max_attribution_step_tokens == 65_536
    monkeypatch.setattr(experiments, "max_attribution_step_tokens", 256 * 255)
    long_text = " ".join(f"w{n}" for n in range(300))
    refused = client.post("/api/attribution", json={"text": long_text, "other": OTHER, "steps": 256})
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "Integrated Gradients costs steps × tokens: 256 × 256 = 65,536 is past this lab's bound of 65,280; "
        "ask for fewer steps or a shorter text"
    )
    assert client.post("/api/attribution", json={"text": TEXT, "other": OTHER, "steps": 256}).status_code == 200
