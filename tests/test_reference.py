"""The real packaged MiniLM: the lab's numbers against independent computations."""

import math

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from app.engine.model import packaged_model_path
from tests.float32 import largest, pass_tolerance, product_tolerance, tolerance

LONG_TEXT = " ".join(f"word{i} and the river bank number {i}." for i in range(150))  # far over 512 tokens
SENTENCES = [
    "the river bank",
    "The animal didn't cross the street because it was too tired.",
    "Café déjà vu: 東京 and naïve façades — 🙂 and שלום!",
    LONG_TEXT,
]


@pytest.fixture(scope="module")
def runs(lab):
    return {text: lab.run_sync(lab.spec(text)) for text in SENTENCES}


@pytest.fixture(scope="module")
def sentence_transformer():
    # The packaged configuration as it is: max_seq_length 256, which the lab's pooling follows.
    return SentenceTransformer(str(packaged_model_path()), device="cpu")


def test_the_river_bank_tokens(runs):
    tokens = runs["the river bank"].tokens
    assert [t.text for t in tokens] == ["[CLS]", "the", "river", "bank", "[SEP]"]
    assert tokens[3].id == 2924
    assert [t.special for t in tokens] == [True, False, False, False, True]
    assert ("the river bank"[tokens[3].start : tokens[3].end]) == "bank"


def test_long_text_is_truncated_to_512(runs):
    run = runs[LONG_TEXT]
    assert run.truncated and len(run.tokens) == 512
    assert run.tokens[-1].text == "[SEP]"
    assert not runs["the river bank"].truncated


@pytest.mark.parametrize("text", SENTENCES, ids=["bank", "animal", "unicode", "long"])
def test_weights_equal_output_attentions(minilm, runs, text):
    run = runs[text]
    ids = torch.tensor([[t.id for t in run.tokens]])
    reference = minilm.model(input_ids=ids, output_attentions=True)
    config = minilm.model.config
    for layer, weights in enumerate(reference.attentions):
        got = run.attention()[layer]
        assert got.shape == (12, len(run.tokens), len(run.tokens))
        assert (got - weights[0]).abs().max() <= pass_tolerance(config)
        head = run.head(layer, 7)
        scores_tolerance = product_tolerance(head["q"] * 32**-0.5, head["k"].T)
        assert (head["scores"].softmax(-1) - head["weights"]).abs().max() <= scores_tolerance
        assert (head["weights"] @ head["v"] - head["context"]).abs().max() <= product_tolerance(
            head["weights"], head["v"]
        )
    last = reference.last_hidden_state[0].detach()
    assert (run.activations["blocks.5.output"] - last).abs().max() <= pass_tolerance(config, largest(last))


@pytest.mark.parametrize("text", SENTENCES, ids=["bank", "animal", "unicode", "long"])
def test_mean_pooled_vector_equals_sentence_transformers(minilm, runs, sentence_transformer, text):
    run = runs[text]
    expected = sentence_transformer.encode([text], normalize_embeddings=True)[0]
    normalized = (run.pooled / run.pooled.norm()).numpy()
    cosine = float(normalized @ expected / np.linalg.norm(expected))
    assert cosine > 0.99999
    assert np.abs(normalized - expected).max() <= pass_tolerance(minilm.model.config)


def test_embedding_rows_are_the_tables_rows(minilm, runs):
    run = runs["the river bank"]
    embeddings = minilm.model.embeddings
    table = embeddings.word_embeddings.weight
    assert torch.equal(run.embeddings()["word"][3], table[2924])  # bit for bit: no rounding (a table's row)
    for token in run.tokens:
        assert torch.equal(run.embeddings()["word"][token.index], table[token.id])  # bit for bit: no rounding
        assert torch.equal(  # bit for bit: no rounding
            run.embeddings()["position"][token.index], embeddings.position_embeddings.weight[token.index]
        )
    parts = run.embeddings()
    torch.testing.assert_close(parts["sum"], parts["word"] + parts["position"] + parts["token_type"])


def layer_norm(x, weight, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def numpy_block_0(minilm, ids, causal):
    """Embeddings and block 0 from the raw weights, in float64 NumPy: no torch, no transformers code."""
    w = {name: value.double().numpy() for name, value in minilm.model.state_dict().items()}
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
    p = "encoder.layer.0."

    def linear(h, name):
        return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

    def heads(h):  # [pos, 384] -> [head, pos, 32]
        return h.reshape(n, 12, 32).transpose(1, 0, 2)

    q, k, v = (heads(linear(x, f"attention.self.{name}")) for name in ("query", "key", "value"))
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(32)
    if causal:
        scores = np.where(np.triu(np.ones((n, n)), 1) == 1, -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = (weights @ v).transpose(1, 0, 2).reshape(n, 384)
    h = layer_norm(
        x + linear(context, "attention.output.dense"),
        w[p + "attention.output.LayerNorm.weight"],
        w[p + "attention.output.LayerNorm.bias"],
    )
    ffn = linear(gelu(linear(h, "intermediate.dense")), "output.dense")
    out = layer_norm(h + ffn, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
    return {"weights": weights, "residual": h, "ffn_output": ffn, "output": out}


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_numpy_reimplementation_reproduces_block_0(minilm, lab, mask):
    run = lab.run_sync(lab.spec("The animal didn't cross the street because it was too tired.", mask=mask))
    expected = numpy_block_0(minilm, [t.id for t in run.tokens], causal=mask == "causal")
    layer = run.layer(0)
    config = minilm.model.config
    np.testing.assert_allclose(run.attention()[0].numpy(), expected["weights"], atol=pass_tolerance(config, blocks=1))
    for name, want in (("resid_mid", "residual"), ("ffn_output", "ffn_output"), ("output", "output")):
        atol = pass_tolerance(config, largest(expected[want]), blocks=1)
        np.testing.assert_allclose(layer[name].numpy(), expected[want], atol=atol, err_msg=name)


def test_causal_weights_upper_triangle_is_zero_and_rows_sum_to_one(lab):
    run = lab.run_sync(lab.spec("a causal mask hides every later token", mask="causal"))
    weights = torch.stack(run.attention())
    assert torch.all(weights.triu(1) == 0)
    assert (weights.sum(-1) - 1).abs().max() <= tolerance(weights.shape[-1])
    bidirectional = torch.stack(lab.run_sync(lab.spec("a causal mask hides every later token")).attention())
    above_diagonal = torch.ones(weights.shape[-2:], dtype=torch.bool).triu(1)
    assert (bidirectional[..., above_diagonal] > 0).all()


@pytest.mark.parametrize("strategy", ["cls", "max", "mean"])
def test_pooling_strategies(lab, strategy):
    run = lab.run_sync(lab.spec("pooling makes one vector", pooling=strategy))
    output = run.layer(5)["output"]
    expected = {"cls": output[0], "max": output.max(0).values, "mean": output.mean(0)}[strategy]
    assert run.spec.pooling == strategy
    torch.testing.assert_close(run.pooled, expected)
