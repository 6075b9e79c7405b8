"""The sentence vector as a sentence-transformers folder defines it (modules.json: Pooling, Dense, Normalize, and
the prompts of config_sentence_transformers.json), against SentenceTransformer(folder).encode on tiny random
folders that sentence-transformers itself wrote (tests/families.py), and each pooling against its Pooling
module."""

import json
import shutil

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

from app.engine.model import ModelLoadError, load_model
from app.engine.sentence import POOLINGS, pool
from app.main import create_app
from tests.families import BUILDERS, build, sentence_transformers_folder
from tests.float32 import largest, pass_tolerance, sum_tolerance, tolerance

TEXT = "The cat sat on the mat."
# (builder, the modules after the transformer as sentence-transformers wrote them: module, vector size)
FOLDERS = {
    "qwen3-embedding": [("Pooling", 64), ("Normalize", 64)],
    "embeddinggemma": [("Pooling", 64), ("Dense", 96), ("Dense", 48), ("Normalize", 48)],
    "modernbert": [("Pooling", 64)],
}


@pytest.mark.parametrize("strategy", list(POOLINGS))
@pytest.mark.parametrize("prompt_length", [0, 3])
def test_each_pooling_is_sentence_transformers_own(strategy, prompt_length):
    """Its Pooling module on one unpadded sequence, the prompt's tokens left out (include_prompt false) or not."""
    torch.manual_seed(0)
    states = torch.randn(1, 9, 16)
    module = Pooling(16, pooling_mode=POOLINGS[strategy], include_prompt=prompt_length == 0)
    features = {"token_embeddings": states, "attention_mask": torch.ones(1, 9, dtype=torch.int64)}
    expected = module({**features, "prompt_length": prompt_length})["sentence_embedding"][0]
    atol = tolerance(9, largest(states))  # at most the 9 positions summed
    torch.testing.assert_close(pool(states[0], strategy, prompt_length), expected, atol=atol, rtol=0)


@pytest.fixture(scope="module", params=list(FOLDERS))
def folder(request, tmp_path_factory):
    return request.param, build(request.param, tmp_path_factory.mktemp(request.param) / request.param)


def lab_of(folder):
    return TestClient(create_app(load_model(folder)))


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_the_sentence_vector_is_what_sentence_transformers_encodes(folder):
    name, path = folder
    encoder = SentenceTransformer(str(path), device="cpu")
    with lab_of(path) as client:
        model = client.get("/api/model").json()
        assert model["prompts"] == encoder.prompts
        assert [module["module"] for module in model["sentence_modules"]] == [kind for kind, _ in FOLDERS[name]]
        for prompt in [None, *encoder.prompts]:
            body = client.post("/api/analyze", json={"text": TEXT, "prompt": prompt or ""}).json()
            expected = encoder.encode([TEXT], prompt_name=prompt, prompt=None if prompt else "")[0]
            pooled = body["pooled"]
            assert cosine(pooled["embedding"], expected) > 0.99999, (name, prompt)
            atol = pass_tolerance(encoder[0].auto_model.config, largest(expected))
            np.testing.assert_allclose(pooled["embedding"], expected, atol=atol)
            stages = [(stage["module"], len(stage["vector"])) for stage in pooled["stages"]]
            assert stages == FOLDERS[name] and pooled["stages"][0]["vector"] == pooled["vector"]
            # The tokens the prompt puts before the text are marked, and spell it; the text's offsets index the text.
            before = encoder.prompts.get(prompt, "")
            marked = [token for token in body["tokens"] if token["prompt"]]
            assert "".join(token["text"] for token in marked).strip() == before.strip()
            assert body["prompt"] == prompt
            first = next(token for token in body["tokens"] if not token["prompt"] and not token["added"])
            assert TEXT[first["start"] : first["end"]].strip() == first["text"].strip()


def test_a_pooling_that_leaves_the_prompt_out_and_a_default_prompt(folder, tmp_path):
    """include_prompt false (an INSTRUCTOR-style Pooling) and default_prompt_name: as sentence-transformers
    reads them."""
    name, path = folder
    if name != "embeddinggemma":
        return
    changed = shutil.copytree(path, tmp_path / "changed")
    pooling = json.loads((changed / "1_Pooling" / "config.json").read_text())
    (changed / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "include_prompt": False}))
    settings = json.loads((changed / "config_sentence_transformers.json").read_text())
    settings["default_prompt_name"] = "query"
    (changed / "config_sentence_transformers.json").write_text(json.dumps(settings))
    encoder = SentenceTransformer(str(changed), device="cpu")
    with lab_of(changed) as client:
        body = client.post("/api/analyze", json={"text": TEXT}).json()
        assert body["prompt"] == "query"
        expected = encoder.encode([TEXT])[0]
        atol = pass_tolerance(encoder[0].auto_model.config, largest(expected))
        np.testing.assert_allclose(body["pooled"]["embedding"], expected, atol=atol)
        prompted = sum(token["prompt"] for token in body["tokens"])
        assert body["pooled"]["tokens"] == len(body["tokens"])
        assert prompted > 0
        refused = client.post("/api/analyze", json={"text": TEXT, "prompt": "passage"})
        assert refused.status_code == 422 and "document, query" in refused.json()["detail"]


def test_the_pooling_lesson_compares_a_models_prompt(folder):
    name, path = folder
    if name != "qwen3-embedding":
        return
    encoder = SentenceTransformer(str(path), device="cpu")
    with lab_of(path) as client:
        body = client.post("/api/pooling", json={"text": TEXT, "prompt": "query"}).json()
    assert body["prefix"]["text"] == encoder.prompts["query"] + TEXT
    plain, prompted = encoder.encode([TEXT], prompt=""), encoder.encode([TEXT], prompt_name="query")
    atol = pass_tolerance(encoder[0].auto_model.config)
    assert body["prefix"]["cosine"] == pytest.approx(cosine(plain[0], prompted[0]), abs=atol)


def test_a_module_the_lab_does_not_run_stops_it_in_one_line(folder, tmp_path):
    name, path = folder
    if name != "modernbert":
        return
    changed = shutil.copytree(path, tmp_path / "changed")
    modules = json.loads((changed / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "", "type": "sentence_transformers.models.LayerNorm"})
    (changed / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelLoadError) as refused:
        load_model(changed)
    assert "\n" not in str(refused.value) and "LayerNorm" in str(refused.value)


def test_a_folder_pooled_another_way_offers_its_own_pooling(folder, tmp_path):
    """A Pooling module of position-weighted means: the lab offers it beside its usual ones, as the default."""
    name, path = folder
    if name != "modernbert":
        return
    changed = shutil.copytree(path, tmp_path / "changed")
    pooling = json.loads((changed / "1_Pooling" / "config.json").read_text())
    (changed / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "pooling_mode": "weightedmean"}))
    encoder = SentenceTransformer(str(changed), device="cpu")
    with lab_of(changed) as client:
        model = client.get("/api/model").json()
        assert (model["poolings"], model["default_pooling"]) == (
            ["mean", "cls", "max", "weighted_mean"],
            "weighted_mean",
        )
        body = client.post("/api/analyze", json={"text": TEXT}).json()
        expected = encoder.encode([TEXT])[0]
        atol = pass_tolerance(encoder[0].auto_model.config, largest(expected))
        np.testing.assert_allclose(body["pooled"]["embedding"], expected, atol=atol)
        assert '<option value="weighted_mean">position-weighted mean</option>' in client.get("/").text


def test_the_similarity_attribution_targets_the_models_own_sentence_vectors(folder):
    """Its output is the cosine of the two sentence vectors sentence-transformers encodes (Dense and Normalize
    included), and gradient × input sums over the tokens to what Integrated Gradients would approach."""
    name, path = folder
    if name != "embeddinggemma":
        return
    encoder = SentenceTransformer(str(path), device="cpu")
    with lab_of(path) as client:
        body = client.post("/api/attribution", json={"text": TEXT, "other": "A quick brown fox!", "steps": 32}).json()
    a, b = encoder.encode([TEXT, "A quick brown fox!"])
    assert body["output"] == pytest.approx(cosine(a, b), abs=pass_tolerance(encoder[0].auto_model.config))
    assert sum(body["attributions"]) - (body["output"] - body["baseline_output"]) == pytest.approx(
        body["delta"], abs=sum_tolerance([*body["attributions"], body["output"], body["baseline_output"]])
    )


@pytest.mark.parametrize("family", [name for name in BUILDERS if name not in FOLDERS])
def test_every_family_in_a_sentence_transformers_folder_encodes_as_it(family, tmp_path):
    """Every other family, wrapped by sentence-transformers with the family's own pooling and Normalize."""
    folder = build(family, tmp_path / family)
    decoder = family in ("gpt2", "llama", "qwen2", "mistral", "qwen3", "gemma3")
    sentence_transformers_folder(folder, "lasttoken" if decoder else "mean", normalize=True)
    encoder = SentenceTransformer(str(folder), device="cpu")
    if encoder.tokenizer.pad_token is None:  # one sentence is never padded; sentence-transformers asks for one
        encoder.tokenizer.pad_token = encoder.tokenizer.eos_token
    with lab_of(folder) as client:
        body = client.post("/api/analyze", json={"text": TEXT}).json()
    expected = encoder.encode([TEXT])[0]
    assert cosine(body["pooled"]["embedding"], expected) > 0.99999
    atol = pass_tolerance(encoder[0].auto_model.config, largest(expected))
    np.testing.assert_allclose(body["pooled"]["embedding"], expected, atol=atol)
