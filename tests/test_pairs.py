"""Sentence pairs (segment B) through the real MiniLM, checked against transformers' own run of the pair."""

import shutil

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from app.engine.engine import segments
from app.engine.errors import InvalidInput
from app.engine.model import load_model
from tests.conftest import make_lab
from tests.float32 import largest, pass_tolerance

PAIR = {"text": "the river bank", "text_pair": "it was steep"}


@pytest.fixture(scope="module")
def pair(client):
    response = client.post("/api/analyze", json=PAIR)
    assert response.status_code == 200
    return response.json()


def test_pair_tokens_segments_types_and_offsets(pair):
    tokens = pair["tokens"]
    assert [t["text"] for t in tokens] == ["[CLS]", "the", "river", "bank", "[SEP]", "it", "was", "steep", "[SEP]"]
    assert [t["segment"] for t in tokens] == ["A"] * 5 + ["B"] * 4
    assert [t["token_type"] for t in tokens] == [0] * 5 + [1] * 4
    assert [t["special"] for t in tokens] == [True, False, False, False, True, False, False, False, True]
    assert [PAIR["text"][t["start"] : t["end"]] for t in tokens[1:4]] == ["the", "river", "bank"]
    assert [PAIR["text_pair"][t["start"] : t["end"]] for t in tokens[5:8]] == ["it", "was", "steep"]
    assert pair["text_pair"] == "it was steep" and pair["truncated"] is False


def test_pair_numbers_are_transformers_own(client, minilm, pair):
    inputs = minilm.tokenizer(PAIR["text"], PAIR["text_pair"], return_tensors="pt")
    assert [t["id"] for t in pair["tokens"]] == inputs["input_ids"][0].tolist()
    assert [t["token_type"] for t in pair["tokens"]] == inputs["token_type_ids"][0].tolist()
    with torch.no_grad():
        reference = minilm.model(**inputs, output_attentions=True)
    run_id = pair["run_id"]
    for layer, weights in enumerate(reference.attentions):
        for head in range(weights.shape[1]):
            served = client.get(f"/api/runs/{run_id}/layers/{layer}/heads/{head}").json()["weights"]
            np.testing.assert_allclose(served, weights[0, head].numpy(), atol=pass_tolerance(minilm.model.config))
    # The token-type rows show which embedding the model itself added: row 1 for B, row 0 for A.
    table = minilm.model.embeddings.token_type_embeddings.weight.detach().numpy()
    token_type = np.array(client.get(f"/api/runs/{run_id}/embeddings").json()["token_type"], dtype=np.float32)
    np.testing.assert_array_equal(token_type[:5], np.tile(table[0], (5, 1)))  # bit for bit: no rounding (rows)
    np.testing.assert_array_equal(token_type[5:], np.tile(table[1], (4, 1)))  # bit for bit: no rounding (rows)
    assert pair["pooled"]["strategy"] == "mean"
    last = reference.last_hidden_state[0].numpy()
    atol = pass_tolerance(minilm.model.config, largest(last))
    np.testing.assert_allclose(pair["pooled"]["vector"], last.mean(0), atol=atol)


def test_a_long_pair_is_cut_to_512_keeping_both_segments(client, minilm):
    text, text_pair = "the river bank " * 134, "it was steep " * 134  # 402 and 402 words
    body = client.post("/api/analyze", json={"text": text, "text_pair": text_pair}).json()
    tokens = body["tokens"]
    assert body["truncated"] is True and len(tokens) == 512
    expected = minilm.tokenizer(text, text_pair, truncation="longest_first", max_length=512)
    assert [t["id"] for t in tokens] == expected["input_ids"]
    assert [t["token_type"] for t in tokens] == expected["token_type_ids"]
    segment_a = [t for t in tokens if t["segment"] == "A"]
    segment_b = [t for t in tokens if t["segment"] == "B"]
    assert len(segment_a) == 256 and len(segment_b) == 256  # longest_first cuts the longer side until even
    assert segment_a[-1]["text"] == "[SEP]" and tokens[-1]["text"] == "[SEP]" and tokens[-1]["segment"] == "B"
    assert all(text_pair[t["start"] : t["end"]] in {"it", "was", "steep"} for t in segment_b[:-1])


@pytest.mark.parametrize("b_words, truncated", [(255, False), (256, True)])
def test_truncated_exactly_when_the_pair_is_over_512_tokens(lab, b_words, truncated):
    run = lab.run_sync(lab.spec("a " * 254, text_pair="a " * b_words))  # one token a word: 254 + b_words + 3 specials
    assert len(run.tokens) == 512 and run.truncated is truncated


BAD_PAIRS = [
    ({"text": "ok", "text_pair": ""}, 422, "text_pair: must not be empty"),
    ({"text": "ok", "text_pair": " \n\t"}, 422, "text_pair: must not be empty"),
    ({"text": "ok", "text_pair": 3}, 422, "text_pair: Input should be a valid string"),
    ({"text": "ok", "text_pair": ["b"]}, 422, "text_pair: Input should be a valid string"),
    ({"text": "ok", "text_pair": "\x00\x01\u200b"}, 422, "text_pair has no characters"),
    ({"text": "\x00\x01\u200b", "text_pair": "ok"}, 422, "the text has no characters"),
    ({"text": "a" * 20_001, "text_pair": "b" * 20_000}, 413, "text and text_pair have 40,001 characters"),
]


@pytest.mark.parametrize("body, status, message", BAD_PAIRS)
def test_bad_pairs_get_a_clear_error(client, body, status, message):
    response = client.post("/api/analyze", json=body)
    assert response.status_code == status
    assert message in response.json()["detail"]


def test_pairs_are_kept_by_both_texts(client, lab):
    first = client.post("/api/analyze", json=PAIR).json()["run_id"]
    assert client.post("/api/analyze", json=PAIR).json()["run_id"] == first
    alone = client.post("/api/analyze", json={"text": PAIR["text"]}).json()
    assert alone["run_id"] != first and alone["text_pair"] is None
    assert client.post("/api/analyze", json={**PAIR, "text_pair": None}).json()["run_id"] == alone["run_id"]
    swapped = {"text": PAIR["text_pair"], "text_pair": PAIR["text"]}
    assert client.post("/api/analyze", json=swapped).json()["run_id"] != first
    pair = lab.spec("kept as a pair", text_pair="or not")
    run = lab.run_sync(pair)
    assert lab.kept(lab.spec("kept as a pair", text_pair="or not")) is run and run.spec.text_pair == "or not"
    assert lab.kept(lab.spec("kept as a pair")) is None
    assert lab.run_sync(pair) is run


def test_segments_follow_the_sequence_not_the_token_type():
    # RoBERTa's <s> A </s></s> B </s>, whose B tokens are type 0: the sequence ids still say B.
    assert segments([None, 0, 0, None, None, 1, None]) == ["A", "A", "A", "A", "A", "B", "B"]
    assert segments([None, 0, None]) == ["A", "A", "A"]


def test_a_model_with_one_token_type_refuses_a_pair(tmp_path, tiny_model_dir):
    config = BertConfig(
        vocab_size=30522,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        type_vocab_size=1,
    )
    BertModel(config).save_pretrained(tmp_path)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tiny_model_dir / name, tmp_path / name)
    lab = make_lab(load_model(tmp_path), tmp_path)
    assert len(lab.run_sync(lab.spec("one segment")).tokens) == 4
    with pytest.raises(InvalidInput, match="without a segment B"):
        lab.run_sync(lab.spec("one segment", text_pair="and another"))
