"""The search lesson (app.engine.search, app.serving.search): an index's vectors against sentence-transformers'
encode, for MiniLM and for folders whose prompts read queries and documents; the exact top k against NumPy's
argsort of the cosines; the HNSW graph's recall@k against it; a cross-encoder folder against CrossEncoder.predict;
the pair view's A → B cells against the engine's run; an index's progress, its cancel and a restart, as the
atlas's; and the class question "which document comes first?" against the exact ranking."""

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from sentence_transformers import CrossEncoder, SentenceTransformer
from transformers import BertConfig, BertForSequenceClassification

from app.engine import corpus, search
from app.engine.engine import Engine
from app.engine.model import ModelLoadError, load_model, packaged_model_path
from app.engine.rerank import load_cross_encoder
from app.engine.search import SAMPLE_QUERIES
from app.engine.spec import IndexSpec, from_canonical
from app.main import create_app
from app.serving.search import Searches
from app.settings import get_settings
from tests.conftest import TOKENIZER_FILES, LabProcess, left_midway, make_lab, run_async
from tests.families import build
from tests.float32 import largest, pass_tolerance

ROOT = Path(__file__).resolve().parents[1]
# A sample of the shipped corpus, a document longer than MiniLM's 256-token pooling length, and one in French.
LONG = " ".join(["The river bank was steep and the water was cold."] * 40)
DOCUMENTS = (*search.shipped_documents()[::40], LONG, "La banque a relevé son taux d'intérêt.")


def drain(slices):
    """Runs a job's slices in order, as Lab.in_turns does, and returns what the last returns."""
    result = None
    for piece in slices:
        result = piece()
    return result


@pytest.fixture(scope="module")
def searches(minilm, tmp_path_factory):
    return Searches(make_lab(minilm, tmp_path_factory.mktemp("search"), max_runs=64, max_chars=20_000))


def encoded_index(searches, spec: IndexSpec) -> search.SearchIndex:
    async def go():
        await searches.start(spec)
        return await searches.index(spec)

    return run_async(go())


def test_the_shipped_corpus_is_what_its_generator_writes():
    assert search.CORPUS.read_text() == "".join(line + "\n" for line in corpus.documents())
    documents = search.shipped_documents()
    assert len(documents) == len(set(documents)) >= 3000
    money = [line for line in documents if "bank" in line and ("loan" in line or "interest" in line)]
    river = [line for line in documents if "bank" in line and ("river" in line or "stream" in line)]
    assert money and river


def test_the_index_is_what_sentence_transformers_encodes(searches, minilm):
    spec = IndexSpec(minilm.name, minilm.digest, DOCUMENTS)
    index = encoded_index(searches, spec)
    expected = SentenceTransformer(str(minilm.path), device="cpu").encode(list(DOCUMENTS), convert_to_numpy=True)
    atol = pass_tolerance(minilm.model.config, largest(expected))  # tests/float32.py: normalised vectors
    np.testing.assert_allclose(index.vectors.numpy(), expected, atol=atol, rtol=0)
    assert index.cut == 1 and index.passes >= 1
    assert from_canonical(spec.canonical()) == spec
    assert run_async(searches.spec(spec.run_id)) == spec
    # A typed prefix is read as part of every document's text.
    prefixed = encoded_index(searches, IndexSpec(minilm.name, minilm.digest, DOCUMENTS[:5], prefix="passage: "))
    encoder = SentenceTransformer(str(minilm.path), device="cpu")
    expected = encoder.encode([f"passage: {document}" for document in DOCUMENTS[:5]], convert_to_numpy=True)
    np.testing.assert_allclose(prefixed.vectors.numpy(), expected, atol=atol, rtol=0)


@pytest.mark.parametrize("family", ["embeddinggemma", "qwen3-embedding"])
def test_a_folder_with_prompts_reads_queries_and_documents_with_their_own(family, tmp_path):
    loaded = load_model(build(family, tmp_path / family))
    engine = Engine(loaded, 20_000)
    searches = Searches(make_lab(loaded, tmp_path, max_chars=20_000))
    assert search.side_prompt(engine, "document", None) == "document"
    assert search.side_prompt(engine, "query", None) == "query"
    documents = DOCUMENTS[:12]
    index = encoded_index(searches, IndexSpec(loaded.name, loaded.digest, documents, "document"))
    encoder = SentenceTransformer(str(loaded.path), device="cpu")
    expected = encoder.encode(list(documents), prompt_name="document", convert_to_numpy=True)
    atol = pass_tolerance(loaded.model.config, largest(expected))
    np.testing.assert_allclose(index.vectors.numpy(), expected, atol=atol, rtol=0)
    read, _ = run_async(searches.query(engine, SAMPLE_QUERIES[0], "query", ""))
    expected = encoder.encode(SAMPLE_QUERIES[0], prompt_name="query", convert_to_numpy=True)
    np.testing.assert_allclose(read.vector.numpy(), expected, atol=atol, rtol=0)
    assert read.text == loaded.pipeline.prompts["query"] + SAMPLE_QUERIES[0]


def test_the_exact_top_k_is_numpys_argsort_and_the_graphs_recall_is_measured(searches, minilm):
    spec = IndexSpec(minilm.name, minilm.digest, search.shipped_documents()[::3])
    index = encoded_index(searches, spec)
    vectors = index.vectors.double().numpy()
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    recalls = []
    for query in SAMPLE_QUERIES:
        found = run_async(searches.search(spec, query, 10, None, "", (search.M, search.EF_CONSTRUCTION, search.EF)))
        q = found["query"].vector.double().numpy()
        cosines = unit @ (q / np.linalg.norm(q))
        expected = np.argsort(-cosines, kind="stable")[:10]
        assert [hit.document for hit in found["exact"]] == expected.tolist()
        np.testing.assert_allclose([hit.score for hit in found["exact"]], cosines[expected], atol=1e-12)
        recalls.append(found["recall"])
        assert found["recall"] == search.recall(found["approximate"], found["exact"])
        # The graph's scores are the same cosines (its float32 product of unit vectors).
        np.testing.assert_allclose(
            [hit.score for hit in found["approximate"]],
            cosines[[hit.document for hit in found["approximate"]]],
            atol=1e-6,
        )
    print(
        f"\nrecall@10 of usearch's HNSW (M {search.M}, ef_construction {search.EF_CONSTRUCTION}, ef {search.EF}) "
        f"against the exact top 10, {len(spec.documents):,} documents, {len(SAMPLE_QUERIES)} queries: "
        f"mean {np.mean(recalls):.3f}, lowest {min(recalls):.1f}"
    )
    assert np.mean(recalls) >= 0.9
    # A graph with one link a vector and a shallow search misses some of them: the knobs matter.
    sparse = run_async(searches.search(spec, SAMPLE_QUERIES[0], 10, None, "", (2, 2, 1)))
    assert sparse["graph"].m == 2 and 0 <= sparse["recall"] <= 1


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def test_the_graph_is_the_same_on_every_build_and_within_its_stated_bytes(minilm):
    """usearch reports a 16 MiB arena it reserves (memory_usage) and touches a page of it at a time: what the
    process's resident memory grows by is the graph's cost."""
    vectors = torch.randn(3000, 384, generator=torch.Generator().manual_seed(0))
    spec = IndexSpec(minilm.name, minilm.digest, ("x",) * 3000)
    index = search.SearchIndex(spec, vectors, vectors.double() / vectors.double().norm(dim=1, keepdim=True), 0, 0, 0)
    before = resident_bytes()
    first = drain(search.graph_slices(index, 16, 64))
    grown = resident_bytes() - before
    assert 0 < grown <= search.graph_bytes(3000, 384, 16)
    second = drain(search.graph_slices(index, 16, 64))
    for query in vectors[:20]:
        assert first.search(query, 10, 16) == second.search(query, 10, 16)


def cross_encoder_folder(folder):
    """A tiny random BERT with a one-label sequence-classification head, saved as save_pretrained writes it."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
    )
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(packaged_model_path() / name, folder / name)
    return folder


def relevance_tolerance(config, expected) -> float:
    """How far the lab's relevance may be from CrossEncoder.predict's: their padded passes group the pairs
    differently (tests/float32.py), a logit of the tanh pooler's values (at most 1) or its sigmoid."""
    return pass_tolerance(config, max(1.0, largest(expected)))


def predicted_and_scored(folder):
    """CrossEncoder.predict's scores of eight pairs and the lab's, and the tolerance they may differ by."""
    pairs = [(SAMPLE_QUERIES[0], document) for document in DOCUMENTS[:8]]
    expected = CrossEncoder(str(folder), device="cpu").predict(pairs, convert_to_numpy=True)
    cross = load_cross_encoder(folder)
    found = drain(cross.score_slices(SAMPLE_QUERIES[0], list(DOCUMENTS[:8])))
    return np.array(found), expected, relevance_tolerance(cross.model.config, expected)


def test_a_cross_encoder_folder_scores_as_cross_encoder_predict(tmp_path):
    found, expected, atol = predicted_and_scored(cross_encoder_folder(tmp_path / "cross"))
    np.testing.assert_allclose(found, expected, atol=atol, rtol=0)


@pytest.mark.parametrize("activation", [torch.nn.Sigmoid(), torch.nn.Identity()], ids=["sigmoid", "identity"])
def test_a_folder_cross_encoder_save_wrote_scores_through_its_own_activation(tmp_path, activation):
    """The installed sentence-transformers (5.4 on) writes the activation in config_sentence_transformers.json:
    an Identity folder's scores are its logits, not their sigmoid."""
    folder = tmp_path / "saved"
    CrossEncoder(str(cross_encoder_folder(tmp_path / "cross")), device="cpu", activation_fn=activation).save(
        str(folder)
    )
    saved = json.loads((folder / "config_sentence_transformers.json").read_text())
    assert saved["activation_fn"] == f"{type(activation).__module__}.{type(activation).__name__}"
    found, expected, atol = predicted_and_scored(folder)
    np.testing.assert_allclose(found, expected, atol=atol, rtol=0)
    logits = np.log(expected / (1 - expected)) if isinstance(activation, torch.nn.Sigmoid) else expected
    assert np.abs(1 / (1 + np.exp(-logits)) - logits).min() > 0.3  # the two activations' scores far apart here


@pytest.mark.parametrize(
    "written",
    [
        {"sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}},  # 4.0 to 5.3
        {"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"},  # before 4.0
    ],
    ids=["config-block", "before-4"],
)
def test_the_places_older_sentence_transformers_wrote_the_activation_are_read(tmp_path, written):
    folder = cross_encoder_folder(tmp_path / "cross")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **written}))
    found, expected, atol = predicted_and_scored(folder)
    assert np.abs(expected).max() < 0.1  # predict reads Identity there too: logits near 0, not sigmoids near 0.5
    np.testing.assert_allclose(found, expected, atol=atol, rtol=0)


def test_an_activation_that_is_not_a_torch_nn_module_stops_the_cross_encoder_at_load(tmp_path):
    folder = cross_encoder_folder(tmp_path / "cross")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"activation_fn": "builtins.print"}))
    with pytest.raises(ModelLoadError, match="the cross-encoder's activation 'builtins.print'"):
        load_cross_encoder(folder)


@pytest.fixture(scope="module")
def client(minilm, tmp_path_factory):
    """The lab in process, with a cross-encoder folder."""
    folder = cross_encoder_folder(tmp_path_factory.mktemp("cross") / "cross")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTENTION_LAB_CROSS_ENCODER", str(folder))
        get_settings.cache_clear()
        with TestClient(create_app(minilm)) as test_client:
            test_client.cross_folder = folder
            yield test_client
    get_settings.cache_clear()


def index_of(client, documents=DOCUMENTS, **body) -> str:
    started = client.post("/api/search/index", json={"documents": "\n".join(documents), **body})
    assert started.status_code == 200, started.text
    found = client.get(f"/api/search/index/{started.json()['index_id']}")
    assert found.status_code == 200, found.text
    return started.json()["index_id"]


def test_the_pair_view_s_a_to_b_cells_are_the_engine_s(client, minilm):
    index_id = index_of(client)
    answer = client.post("/api/search", json={"index_id": index_id, "query": SAMPLE_QUERIES[0], "k": 5})
    assert answer.status_code == 200, answer.text
    top = [hit["document"] for hit in answer.json()["exact"]]
    asked = {"index_id": index_id, "query": SAMPLE_QUERIES[0], "documents": top, "layer": 3, "head": 7, "shown": 1}
    pairs = client.post("/api/search/pairs", json=asked)
    assert pairs.status_code == 200, pairs.text
    body = pairs.json()
    assert body["layout"] == "[CLS] A [SEP] B [SEP]"
    engine = Engine(minilm, 20_000)
    run = engine.compute(engine.spec(SAMPLE_QUERIES[0], DOCUMENTS[top[1]], prompt=""))
    assert body["shown"]["run_id"] == run.run_id == body["pairs"][1]["run_id"]
    rows = [token.index for token in run.tokens if token.segment == "A"]
    cols = [token.index for token in run.tokens if token.segment == "B"]
    weights = run.weights(3)[7]
    # The pairs ran as one padded batch, the run alone: the same sums in other orders (tests/float32.py).
    atol = pass_tolerance(minilm.model.config)
    np.testing.assert_allclose(body["shown"]["cells"], weights[rows][:, cols].double().numpy(), atol=atol, rtol=0)
    assert body["shown"]["rows"][:2] == ["[CLS]", "where"] and body["shown"]["cols"][-1].startswith("[SEP]")
    share = torch.stack([run.weights(layer).double() for layer in range(6)])[:, :, rows][..., cols].sum(-1).mean()
    assert body["pairs"][1]["cross_share"] == pytest.approx(float(share), abs=atol)  # a share of 1, as a weight
    # The cross-encoder's relevance of each pair, as CrossEncoder.predict gives it.
    expected = CrossEncoder(str(client.cross_folder), device="cpu").predict(
        [(SAMPLE_QUERIES[0], DOCUMENTS[document]) for document in top], convert_to_numpy=True
    )
    atol = relevance_tolerance(client.app.state.searches.cross_encoder.model.config, expected)
    np.testing.assert_allclose([pair["relevance"] for pair in body["pairs"]], expected, atol=atol, rtol=0)
    assert body["cross_encoder"] == "cross" and body["cross_ms"] > 0 and body["pairs_ms"] > 0
    # The lab opens the pair from its run id.
    assert client.get(f"/api/runs/{run.run_id}/head-stats").status_code == 200


def test_the_bounds_of_an_index_and_a_search(client):
    too_many = "\n".join(f"Document number {n}." for n in range(5001))
    refused = client.post("/api/search/index", json={"documents": too_many})
    assert refused.status_code == 422 and "5,001 documents; the limit is 5,000" in refused.text
    too_long = client.post("/api/search/index", json={"documents": "a\n" + "word " * 500})
    assert too_long.status_code == 422 and "document 2 has 2,499 characters" in too_long.text
    assert client.post("/api/search/index", json={"documents": "\n \n"}).status_code == 422
    assert client.post("/api/search/index", json={"documents": "a", "prompt": "query"}).status_code == 422
    assert client.get(f"/api/search/index/{'a' * 26}").status_code == 404
    assert client.post("/api/search", json={"index_id": "a" * 26, "query": "x"}).status_code == 404
    index_id = index_of(client, DOCUMENTS[:3])
    past = client.post("/api/search", json={"index_id": index_id, "query": "x", "k": 4})
    assert past.status_code == 422 and "give 1 to 3" in past.text
    pairs = {"index_id": index_id, "query": "x", "documents": [0, 7]}
    assert client.post("/api/search/pairs", json=pairs).status_code == 422
    assert client.post("/api/search/pairs", json={**pairs, "documents": [0], "layer": 6}).status_code == 422


def test_the_class_question_s_answer_is_the_exact_ranking_s_first(client):
    index_id = index_of(client)
    started = client.post("/api/classes").json()
    teacher = {"X-Class-Secret": started["secret"]}
    questions = f"/api/classes/{started['code']}/question"
    query = "an animal that flies at night"
    run = client.post("/api/analyze", json={"text": query}).json()
    ranking = client.post("/api/search", json={"index_id": index_id, "query": query, "k": 4}).json()["exact"]
    asked = client.post(
        questions, json={"kind": "search", "run_id": run["run_id"], "index_id": index_id}, headers=teacher
    )
    assert asked.status_code == 201, asked.text
    state = asked.json()
    assert state["kind"] == "search" and query in state["text"] and state["answer"] is None and state["values"] is None
    assert sorted(choice["document"] for choice in state["choices"]) == sorted(hit["document"] for hit in ranking)
    revealed = client.post(f"{questions}/reveal", headers=teacher).json()
    first = state["choices"][revealed["answer"]["choice"]]
    assert first["document"] == ranking[0]["document"]
    assert revealed["answer"]["value"] == pytest.approx(ranking[0]["score"], abs=1e-12)
    by_document = {hit["document"]: hit["score"] for hit in ranking}
    assert revealed["values"] == pytest.approx([by_document[choice["document"]] for choice in state["choices"]])
    # The teacher's own choices: the answer is the best of them by the same ranking.
    chosen = [ranking[3]["document"], ranking[1]["document"]]
    body = {"kind": "search", "run_id": run["run_id"], "index_id": index_id, "documents": chosen}
    assert client.post(questions, json=body, headers=teacher).status_code == 201
    revealed = client.post(f"{questions}/reveal", headers=teacher).json()
    assert revealed["choices"][revealed["answer"]["choice"]]["document"] == ranking[1]["document"]


def test_a_search_question_asks_among_these_four_and_its_reveal_places_each_in_the_whole_index(client, minilm):
    """The question says it ranks only the documents offered, and the reveal gives each one's place in the whole
    index's exact ranking, checked against sentence-transformers' encode and NumPy: the first of these four is
    the whole index's fifth."""
    index_id = index_of(client)
    query = "an animal that flies at night"
    encoder = SentenceTransformer(str(minilm.path), device="cpu")
    vectors = encoder.encode([query, *DOCUMENTS], convert_to_numpy=True).astype(np.float64)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = unit[1:] @ unit[0]
    order = np.argsort(-cosines, kind="stable")
    # The whole index's 5th, 20th, 42nd and 58th: each more than 1e-3 from its neighbours' cosines.
    offered = order[[4, 19, 41, 57]].tolist()
    started = client.post("/api/classes").json()
    teacher = {"X-Class-Secret": started["secret"]}
    questions = f"/api/classes/{started['code']}/question"
    run = client.post("/api/analyze", json={"text": query}).json()
    body = {"kind": "search", "run_id": run["run_id"], "index_id": index_id, "documents": offered}
    asked = client.post(questions, json=body, headers=teacher)
    assert asked.status_code == 201, asked.text
    state = asked.json()
    assert state["text"] == f"Which of these four documents comes first for “{query}”?"
    assert state["ranks"] is None and state["ranked"] == len(DOCUMENTS)  # a place is an answer: only once revealed
    revealed = client.post(f"{questions}/reveal", headers=teacher).json()
    # Each place as NumPy ranks sentence-transformers' cosines (no other cosine within float32's reach of theirs).
    atol = pass_tolerance(minilm.model.config)
    for choice, rank in zip(revealed["choices"], revealed["ranks"], strict=True):
        cosine = cosines[choice["document"]]
        assert 1 + np.sum(cosines > cosine + atol) == rank == np.sum(cosines >= cosine - atol), (choice, rank)
    assert sorted(revealed["ranks"]) == [5, 20, 42, 58]
    assert revealed["choices"][revealed["answer"]["choice"]]["document"] == offered[0]
    # Two documents offered are "these two".
    body = {**body, "documents": offered[:2]}
    assert client.post(questions, json=body, headers=teacher).json()["text"].startswith("Which of these two documents")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    process = LabProcess(tmp_path_factory.mktemp("search-lab"))
    process.start()
    yield process
    process.stop()


def test_indexing_reports_progress_and_stops_when_its_client_leaves(live):
    documents = [f"{line} (1)" for line in search.shipped_documents()]
    index_id = httpx.post(f"{live.url}/api/search/index", json={"documents": "\n".join(documents)}).json()["index_id"]
    left_midway(live, f"/api/search/index/{index_id}", f"/api/search/index/{index_id}/progress")
    httpx.post(f"{live.url}/api/analyze", json={"text": "after the index"}, timeout=60).raise_for_status()
    assert httpx.get(f"{live.url}/api/search/index/{index_id}/progress").json()["state"] == "not running"


def test_a_restarted_lab_answers_the_same_index_with_the_same_ranking(live):
    started = httpx.post(f"{live.url}/api/search/index", json={"documents": "\n".join(DOCUMENTS)}).json()
    body = {"index_id": started["index_id"], "query": SAMPLE_QUERIES[1], "k": 10}
    before = httpx.post(f"{live.url}/api/search", json=body, timeout=120).json()
    live.stop()
    live.start()
    after = httpx.post(f"{live.url}/api/search", json=body, timeout=120).json()
    assert [hit["document"] for hit in after["exact"]] == [hit["document"] for hit in before["exact"]]
    assert [hit["score"] for hit in after["exact"]] == [hit["score"] for hit in before["exact"]]
    assert after["approximate"]["hits"] == before["approximate"]["hits"]


def test_the_search_plan_s_notes_are_the_answers_its_questions_get(server):
    """static/lessons/search.json, each search question asked of a class over the lab's corpus as the teacher's
    page asks it (each document read after the step's document prefix): the answer is the document, cosine and
    place in the whole corpus its note tells the teacher. On the suite's live lab, whose two indexes of the whole
    corpus the browser's playing of the plan (tests/browser/test_search.py) reads again without computing them."""
    plan = json.loads((ROOT / "static" / "lessons" / "search.json").read_text())
    documents = search.shipped_documents()
    with httpx.Client(base_url=server, timeout=600) as client:
        started = client.post("/api/classes").json()
        teacher = {"X-Class-Secret": started["secret"]}
        questions = f"/api/classes/{started['code']}/question"
        asked = [step for step in plan["steps"] if step["question"]]
        assert asked and all(step["question"]["kind"] == "search" for step in asked)
        for step in asked:
            question = dict(step["question"])
            document_prefix = question.pop("document_prefix", "")
            index_id = client.post("/api/search/index", json={"prefix": document_prefix}).json()["index_id"]
            assert client.get(f"/api/search/index/{index_id}").status_code == 200
            run = client.post("/api/analyze", json={"text": step["view"]["text"]}).json()
            body = {"run_id": run["run_id"], "index_id": index_id, **question}
            state = client.post(questions, json=body, headers=teacher).json()
            read = f", each read after “{document_prefix}”," if document_prefix else ""
            assert state["text"].startswith(
                f"Which of these four documents{read} comes first for “{body.get('prefix', '')}"
            )
            revealed = client.post(f"{questions}/reveal", headers=teacher).json()
            answer = revealed["answer"]["choice"]
            first = revealed["choices"][answer]["document"]
            said = f"({revealed['answer']['value']:.3f})", f"#{revealed['ranks'][answer]})"
            assert f"“{documents[first]}”" in step["note"] and all(part in step["note"] for part in said), (
                step["title"],
                said,
            )
