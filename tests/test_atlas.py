"""The head atlas (app.engine.atlas): each score against NumPy on transformers' own output_attentions, one
sentence at a time; induction on a model built to copy; ablation against the lab's own ablation runs."""

import asyncio
import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch
from sklearn.manifold import TSNE
from transformers import BertConfig, BertModel
from transformers.pytorch_utils import Conv1D

from app.engine import atlas
from app.engine.atlas import Projection
from app.engine.capture import block_outputs, head_dim, starting_at
from app.engine.engine import BATCH_TOKENS, Engine
from app.engine.model import load_model, packaged_model_path
from app.engine.spec import AtlasSpec, from_canonical
from app.serving.atlas import Atlases
from tests.conftest import TOKENIZER_FILES, LabProcess, left_midway, make_lab, run_async, start_together
from tests.families import BUILDERS, build
from tests.float32 import largest, pass_tolerance

SENTENCES = (
    "The cat sat on the mat.",
    "A student asked the teacher why the sky is blue, and the teacher smiled.",
    "Rain.",
    "The bank raised its interest rate again this year.",
    "We sat on the bank of the river and watched the boats go by slowly.",
)


def attentions(loaded, ids) -> list[np.ndarray]:
    """transformers' own weights of one unpadded input: [head, query, key] per block."""
    with torch.inference_mode():
        out = loaded.model(input_ids=torch.tensor([ids]), output_attentions=True)
    return [weights[0].double().numpy() for weights in out.attentions]


# Softmax moves a weight by its own share of its scores' error (dw = w·(ds - Σ w·ds)), so a row's entropy
# -Σ w·log w moves by at most Σ w·|1 + log w| times it: 1 + log n, n ≤ 64 keys.
ENTROPY_GAIN = {"entropy": 1 + np.log(64)}


def numpy_scores(loaded, spec: AtlasSpec) -> dict[str, np.ndarray]:
    """Every score but ablation, from the formulas in app.engine.atlas's docstring."""
    tokenizer = loaded.tokenizer
    rows = [tokenizer(sentence)["input_ids"] for sentence in spec.sentences]
    per = {name: [] for name in ("previous", "self", "sink", "entropy")}
    offsets = {}
    n_rows = 0
    for ids in rows:
        n = len(ids)
        n_rows += n
        for layer, a in enumerate(attentions(loaded, ids)):
            per["self"].append((layer, np.einsum("hqq->h", a), n))
            per["previous"].append((layer, sum(a[:, q, q - 1] for q in range(1, n)), n - 1))
            per["sink"].append((layer, a[:, :, 0].sum(-1), n))
            per["entropy"].append((layer, -(a * np.log(np.maximum(a, 1e-300))).sum((-2, -1)), n))
            for d in range(1 - n, n):
                total = sum(a[:, q, q + d] for q in range(n) if 0 <= q + d < n)
                offsets[layer, d] = offsets.get((layer, d), 0) + total
    layers, heads = len(attentions(loaded, rows[0])), loaded.model.config.num_attention_heads
    scores = {}
    for name, parts in per.items():
        sums, counts = np.zeros((layers, heads)), np.zeros(layers)
        for layer, value, count in parts:
            sums[layer] += value
            counts[layer] += count
        scores[name] = sums / counts[:, None]
    scores["positional"] = np.array(
        [
            np.max([offsets[layer, d] for d in range(-63, 64) if (layer, d) in offsets], axis=0) / n_rows
            for layer in range(layers)
        ]
    )
    return scores


def numpy_examples(loaded, spec: AtlasSpec) -> dict[tuple[int, int], list[tuple[float, int, int, int]]]:
    """Per head, (weight, sentence, query, key) of each sentence's strongest cell on a key the tokenizer did
    not add, the five strongest."""
    found = {}
    for sentence, text in enumerate(spec.sentences):
        ids = loaded.tokenizer(text)["input_ids"]
        own = np.array([i not in loaded.tokenizer.all_special_ids for i in ids])
        for layer, a in enumerate(attentions(loaded, ids)):
            for head, weights in enumerate(a * own[None, :]):
                query, key = np.unravel_index(weights.argmax(), weights.shape)
                found.setdefault((layer, head), []).append((weights[query, key], sentence, query, key))
    return {head: sorted(cells, reverse=True)[:5] for head, cells in found.items()}


@pytest.fixture(scope="module")
def lab(minilm, tmp_path_factory):
    return make_lab(minilm, tmp_path_factory.mktemp("atlas"), max_runs=64, max_chars=20_000)


def computed(lab, spec):
    async def go():
        atlases = Atlases(lab)
        await atlases.start(spec)
        return await atlases.atlas(spec)

    return run_async(go())


def test_each_sentence_score_equals_numpy_on_transformers_attentions(lab, minilm):
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES, repeats=4, repeat_length=8, ablation_sentences=0)
    found = computed(lab, spec)
    expected = numpy_scores(minilm, spec)
    atol = pass_tolerance(minilm.model.config)  # sums of weights over rows, means over rows
    for name, values in expected.items():
        np.testing.assert_allclose(
            found.scores[name].numpy(), values, atol=atol * ENTROPY_GAIN.get(name, 1), err_msg=name
        )
    assert "ablation" not in found.scores
    weights, sentences, queries, keys = found.examples
    for (layer, head), cells in numpy_examples(minilm, spec).items():
        np.testing.assert_allclose(weights[layer, head].numpy(), [cell[0] for cell in cells], atol=atol)
        assert [cell[1:] for cell in cells] == list(
            zip(sentences[layer, head].tolist(), queries[layer, head].tolist(), keys[layer, head].tolist(), strict=True)
        )


def test_induction_is_the_weight_on_the_token_after_the_first_occurrence(lab, minilm):
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES[:1], repeats=3, repeat_length=10, ablation_sentences=0)
    found = computed(lab, spec)
    tokenizer = minilm.tokenizer
    vocab = minilm.model.config.vocab_size
    expected = np.zeros(found.offset.shape)
    generator = torch.Generator().manual_seed(spec.seed)
    allowed = [i for i in range(vocab // 10, vocab) if i not in tokenizer.all_special_ids]
    drawn = torch.randint(len(allowed), (3, 10), generator=generator)
    for row in drawn.tolist():
        copy = [allowed[i] for i in row]
        ids = [tokenizer.cls_token_id, *copy, *copy, tokenizer.sep_token_id]
        for layer, a in enumerate(attentions(minilm, ids)):
            expected[layer] += sum(a[:, 1 + 10 + j, 1 + j + 1] for j in range(10)) / 30
    np.testing.assert_allclose(found.scores["induction"].numpy(), expected, atol=pass_tolerance(minilm.model.config))


def test_ablation_effects_equal_the_labs_own_ablation_runs(lab, minilm):
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES, repeats=1, repeat_length=4, ablation_sentences=2)
    found = computed(lab, spec)
    for layer, head in [(0, 0), (2, 5), (5, 11)]:
        changes = []
        for text in SENTENCES[:2]:
            plain = lab.run_sync(lab.spec(text, prompt=""))
            ablated = lab.run_sync(lab.spec(text, prompt="", ablate=[(layer, head)]))
            changes.append(
                1 - torch.nn.functional.cosine_similarity(plain.embedding.double(), ablated.embedding.double(), dim=0)
            )
        atol = pass_tolerance(minilm.model.config)  # cosines of the atlas's padded passes and of runs alone
        assert float(found.scores["ablation"][layer, head]) == pytest.approx(float(np.mean(changes)), abs=atol)


def test_the_ablation_sample_goes_in_passes_of_the_lab_s_batch_and_gives_the_same_effects(tiny, tmp_path):
    """Forty sentences switched off head by head: every pass of the atlas reads at most BATCH_TOKENS padded
    tokens (the sample in groups, each block's ablated rows of a group in one pass), and the effects are the
    mean over the sample of each sentence's own, as one sentence at a time gives them. On the tiny BERT (MiniLM's
    tokenizer, so the same tokens and groups): the grouping is the atlas's, not the model's."""
    lab = make_lab(tiny, tmp_path)
    sentences = tuple(f"{text} ({n})" for n in range(8) for text in SENTENCES)[:40]
    spec = AtlasSpec(tiny.name, tiny.digest, sentences, repeats=1, repeat_length=4, ablation_sentences=40)
    padded = []
    hook = tiny.model.base_model.embeddings.register_forward_hook(
        lambda module, args, out: padded.append(out.shape[0] * out.shape[1])
    )
    try:
        found = computed(lab, spec)
    finally:
        hook.remove()
    assert len(padded) > 1 and max(padded) <= BATCH_TOKENS  # in groups, each within the bound
    one = [
        computed(lab, AtlasSpec(tiny.name, tiny.digest, (text,), 1, 4, ablation_sentences=1)) for text in sentences[:3]
    ]
    few = computed(lab, AtlasSpec(tiny.name, tiny.digest, sentences[:3], 1, 4, ablation_sentences=3))
    mean = sum(alone.scores["ablation"] for alone in one) / 3
    atol = pass_tolerance(tiny.model.config)  # cosines of padded passes of three and of one
    torch.testing.assert_close(few.scores["ablation"], mean, rtol=0, atol=atol)
    assert found.scores["ablation"].shape == (2, 4)


def test_an_ablation_sample_past_the_bound_is_refused_naming_the_setting_and_what_fits(minilm, tmp_path):
    """The sample's tokens × heads × blocks past ATTENTION_LAB_MAX_ABLATION_TOKENS: 422 at once, on the POST,
    saying how many of these sentences fit; as many as it says are taken."""
    atlases = Atlases(make_lab(minilm, tmp_path), max_ablation_tokens=72 * 40)  # 40 tokens of 12 heads × 6 blocks
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES, repeats=1, repeat_length=4, ablation_sentences=4)
    with pytest.raises(atlas.InvalidInput, match="ATTENTION_LAB_MAX_ABLATION_TOKENS") as refused:
        run_async(atlases.start(spec))
    fit = int(str(refused.value).split("at most ")[1].split(" ")[0])
    lengths = [len(ids) for ids in minilm.tokenizer(list(SENTENCES[:4]))["input_ids"]]
    assert sum(lengths[:fit]) <= 40 < sum(lengths[: fit + 1])
    run_async(atlases.start(AtlasSpec(minilm.name, minilm.digest, SENTENCES, 1, 4, ablation_sentences=fit)))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_an_ablated_pass_started_at_its_block_is_the_model_with_the_heads_columns_of_w_o_zeroed(name, tmp_path):
    """The atlas's ablated passes skip the blocks before the switched-off head (their outputs kept from the
    sample's own pass); the reference is a copy of the model whose W_O has the head's columns set to zero,
    run whole, without hooks."""
    loaded = load_model(build(name, tmp_path / name))
    engine = Engine(loaded, 1000)
    config, family = loaded.model.config, loaded.family
    sample = [torch.tensor(ids) for ids in loaded.tokenizer(list(SENTENCES[:3]))["input_ids"]]
    mask = family.native_mask
    with block_outputs(loaded.model, family) as outputs:
        atlas.sentence_vectors(engine, sample, mask)
    layer = config.num_hidden_layers - 1
    found = atlas.ablated_vectors(engine, sample, mask, layer, outputs[:layer])  # [head, sentence, size]
    assert not any("forward" in vars(block) for block in loaded.model.base_model.get_submodule(family.blocks))
    width = head_dim(config)
    for head in (0, config.num_attention_heads - 1):
        reference = load_model(loaded.path)
        w_o = reference.model.base_model.get_submodule(f"{family.blocks}.{layer}.{family.attention_output}")
        columns = slice(head * width, (head + 1) * width)
        with torch.no_grad():  # GPT-2's Conv1D keeps W_O as [in, out]
            w_o.weight[(columns, slice(None)) if isinstance(w_o, Conv1D) else (slice(None), columns)] = 0
        expected = atlas.sentence_vectors(Engine(reference, 1000), sample, mask)
        atol = pass_tolerance(config, largest(expected))
        np.testing.assert_allclose(found[head].numpy(), expected.numpy(), atol=atol, err_msg=f"{name} head {head}")


def test_blocks_are_skipped_in_the_thread_that_starts_at_a_block_only(minilm):
    """Passes may run side by side (ATTENTION_LAB_MAX_CONCURRENT_PASSES): while this thread starts its passes
    at block 3, another thread's plain pass and its ablated pass from block 2 of another sample compute what
    they compute alone."""
    engine = Engine(minilm, 1000)
    family = minilm.family
    first, second = (
        [torch.tensor(ids) for ids in minilm.tokenizer(list(part))["input_ids"]]
        for part in (SENTENCES[:2], SENTENCES[2:])
    )
    recorded = {}
    for name, sample in (("first", first), ("second", second)):
        with block_outputs(minilm.model, family) as outputs:
            recorded[name] = atlas.sentence_vectors(engine, sample, "bidirectional"), outputs
    alone = atlas.ablated_vectors(engine, second, "bidirectional", 2, recorded["second"][1][:2])
    with ThreadPoolExecutor(1) as other, starting_at(minilm.model, family, recorded["first"][1][:3], 1):
        plain = other.submit(atlas.sentence_vectors, engine, second, "bidirectional").result()
        ablated = other.submit(atlas.ablated_vectors, engine, second, "bidirectional", 2, recorded["second"][1][:2])
        np.testing.assert_allclose(ablated.result().numpy(), alone.numpy(), atol=1e-7)
        np.testing.assert_allclose(plain.numpy(), recorded["second"][0].numpy(), atol=1e-7)
        # This thread's own pass takes blocks 0-2's outputs recorded for the first sample and computes the rest.
        np.testing.assert_allclose(
            atlas.sentence_vectors(engine, first, "bidirectional").numpy(), recorded["first"][0].numpy(), atol=1e-7
        )
    assert not any("forward" in vars(block) for block in minilm.model.base_model.get_submodule(family.blocks))


def test_an_atlas_is_named_by_its_spec_and_read_back_from_the_store(lab, minilm):
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES[:2], repeats=2, repeat_length=5, ablation_sentences=1)
    assert from_canonical(spec.canonical()) == spec
    run_async(Atlases(lab).start(spec))
    assert run_async(Atlases(lab).spec(spec.run_id)) == spec


def copying_bert(folder):
    """A 2-block BERT built to copy: block 0's head 0 moves each token's word vector to the next position
    (its query is the position one back, its key the position), block 1's head 0 looks for the token whose
    previous token is the query's own. The hidden state is three 64-wide parts: word, position, previous word.
    The feed-forward layers add nothing; the other heads are switched off by zero weights."""
    width, heads = 64, 2
    config = BertConfig(
        vocab_size=30522,
        hidden_size=3 * width,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=8,
        max_position_embeddings=width,
        hidden_dropout_prob=0,
        attention_probs_dropout_prob=0,
    )
    model = BertModel(config)
    generator = torch.Generator().manual_seed(1)
    word, position, previous = slice(0, width), slice(width, 2 * width), slice(2 * width, 3 * width)
    head = slice(0, 3 * width // heads)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for norm in [model.embeddings.LayerNorm, *[m for m in model.modules() if type(m).__name__ == "LayerNorm"]]:
            norm.weight.fill_(1)
        embeddings = model.embeddings
        embeddings.word_embeddings.weight[:, word] = torch.randn(30522, width, generator=generator)
        positions = torch.linalg.qr(torch.randn(width, width, generator=generator))[0] * width**0.5
        embeddings.position_embeddings.weight[:, position] = positions
        first, second = (layer.attention for layer in model.encoder.layer)
        # Block 0, head 0: query = the position before, key = the position; the value is the word, written
        # into the previous-word part.
        shift = torch.linalg.lstsq(positions[1:], positions[:-1]).solution  # positions[i] @ shift = positions[i - 1]
        first.self.query.weight[head][:width, position] = 5 * shift.T
        first.self.key.weight[head][:width, position] = torch.eye(width)
        first.self.value.weight[head][:width, word] = torch.eye(width)
        first.output.dense.weight[previous, :width] = torch.eye(width)
        # Block 1, head 0: query = the word, key = the previous word.
        second.self.query.weight[head][:width, word] = 5 * torch.eye(width)
        second.self.key.weight[head][:width, previous] = torch.eye(width)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(packaged_model_path() / name, folder / name)
    return load_model(folder)


def test_a_model_built_to_copy_has_an_induction_head_and_a_random_one_has_none(tiny, tmp_path):
    """Read causally, as induction is defined: bidirectionally the copy's second half would match too."""
    found = {}
    for name, model in [("built", copying_bert(tmp_path / "copier")), ("control", tiny)]:
        spec = AtlasSpec(model.name, model.digest, SENTENCES[:2], 8, 12, ablation_sentences=0, mask="causal")
        found[name] = computed(make_lab(model, tmp_path / name), spec).scores
    assert found["built"]["previous"][0, 0] > 0.9
    assert found["built"]["induction"][1, 0] > 0.9
    assert found["control"]["induction"].max() < 0.2


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The lab as a user runs it, for this module's HTTP tests."""
    process = LabProcess(tmp_path_factory.mktemp("atlas-lab"))
    process.start()
    yield process
    process.stop()


def test_the_api_serves_the_numpy_scores_under_an_id_any_worker_reads(live, minilm, data_dir):
    body = {"sentences": "\n".join(SENTENCES) + "\n\n", "repeats": 4, "repeat_length": 8, "ablation_sentences": 1}
    started = httpx.post(f"{live.url}/api/atlas", json=body).json()
    assert started["sentences"] == len(SENTENCES)
    found = httpx.get(f"{live.url}/api/atlas/{started['atlas_id']}", timeout=60).json()
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES, 4, 8, ablation_sentences=1)
    assert found["atlas_id"] == spec.run_id == started["atlas_id"]
    atol = pass_tolerance(minilm.model.config)
    for name, values in numpy_scores(minilm, spec).items():
        np.testing.assert_allclose(found["scores"][name], values, atol=atol * ENTROPY_GAIN.get(name, 1), err_msg=name)
    for (layer, head), cells in numpy_examples(minilm, spec).items():
        shown = found["examples"][layer][head]
        np.testing.assert_allclose([e["weight"] for e in shown], [cell[0] for cell in cells], atol=atol)
        assert [(e["sentence"], e["query"], e["key"]) for e in shown] == [cell[1:] for cell in cells]
        assert all(e["text"] == SENTENCES[e["sentence"]] for e in shown)
    assert httpx.get(f"{live.url}/api/atlas/{spec.run_id}/progress").json() == {"state": "done", "done": 0, "total": 0}
    # Another worker on the same store reads the spec back, to recompute it.
    assert run_async(Atlases(make_lab(minilm, data_dir)).spec(spec.run_id)) == spec


def test_the_bounds_on_a_corpus(live):
    too_many = "\n".join(f"Sentence number {n}." for n in range(1001))
    answer = httpx.post(f"{live.url}/api/atlas", json={"sentences": too_many})
    assert answer.status_code == 422 and "1,001 sentences; the limit is 1,000" in answer.text
    assert httpx.post(f"{live.url}/api/atlas", json={"sentences": "\n \n"}).status_code == 422
    assert httpx.get(f"{live.url}/api/atlas/{'a' * 26}").status_code == 404
    long = {"sentences": "word " * 100, "repeats": 1, "repeat_length": 2, "ablation_sentences": 0}
    atlas_id = httpx.post(f"{live.url}/api/atlas", json=long).json()["atlas_id"]
    found = httpx.get(f"{live.url}/api/atlas/{atlas_id}", timeout=60).json()
    assert (found["cut"], found["tokens"]) == (1, 64)
    outside = httpx.get(f"{live.url}/api/atlas/{atlas_id}/layers/6/heads/0/space")
    assert outside.status_code == 422 and "no head (6, 0)" in outside.text


def test_a_corpus_run_reports_progress_and_stops_when_its_client_leaves(live):
    lines = [f"{line} ({n})" for n in range(9) for line in atlas.shipped_sentences()]
    atlas_id = httpx.post(f"{live.url}/api/atlas", json={"sentences": "\n".join(lines)}).json()["atlas_id"]
    left_midway(live, f"/api/atlas/{atlas_id}", f"/api/atlas/{atlas_id}/progress")
    assert httpx.get(f"{live.url}/api/atlas/{atlas_id}/progress").json()["state"] == "not running"
    # The pass under way when the run was called off ends after it, on the model's thread, before this one:
    # it must not say the run is running again.
    httpx.post(f"{live.url}/api/analyze", json={"text": "after the atlas"}, timeout=60).raise_for_status()
    assert httpx.get(f"{live.url}/api/atlas/{atlas_id}/progress").json()["state"] == "not running"


def test_another_worker_on_the_same_store_says_how_far_a_corpus_run_is(tmp_path_factory):
    """Two labs on one store, as two workers or replicas are: a progress request reaching the one that is not
    computing the atlas reads its progress from the store, and after the run nobody says it is running."""
    store = {"ATTENTION_LAB_DATA_DIR": str(tmp_path_factory.mktemp("shared-store"))}
    running, other = (LabProcess(tmp_path_factory.mktemp(name), env=store) for name in ("running", "other"))
    start_together(running, other)
    try:
        lines = [f"{line} ({n})" for n in range(9) for line in atlas.shipped_sentences()]
        atlas_id = httpx.post(f"{running.url}/api/atlas", json={"sentences": "\n".join(lines)}).json()["atlas_id"]

        async def poll_the_other():
            async with httpx.AsyncClient(timeout=120) as client:
                computing = asyncio.ensure_future(client.get(f"{running.url}/api/atlas/{atlas_id}"))
                said = []
                while not computing.done():
                    said.append((await client.get(f"{other.url}/api/atlas/{atlas_id}/progress")).json())
                (await computing).raise_for_status()
                return said

        said = run_async(poll_the_other())
        seen = [answer for answer in said if answer["state"] == "running"]
        assert seen and max(answer["done"] for answer in seen) >= 2, said
        assert all(0 <= answer["done"] <= answer["total"] for answer in seen)
        assert [answer["done"] for answer in seen] == sorted(answer["done"] for answer in seen)
        assert httpx.get(f"{other.url}/api/atlas/{atlas_id}/progress").json()["state"] == "not running"
        assert httpx.get(f"{running.url}/api/atlas/{atlas_id}/progress").json()["state"] == "done"
    finally:
        running.stop()
        other.stop()


def test_a_heads_queries_and_keys_share_one_pca_space_as_numpy_makes_it(lab, minilm):
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES, 1, 2, ablation_sentences=0)
    atlases = Atlases(lab)
    run_async(atlases.start(spec))
    found = run_async(atlases.head_space(spec, 2, 5, Projection()))
    # q and k from transformers' own hidden states and the block's raw weights.
    attention = minilm.model.encoder.layer[2].attention.self
    columns = slice(5 * 32, 6 * 32)
    qs, ks = [], []
    for text in SENTENCES:
        with torch.inference_mode():
            hidden = minilm.model(**minilm.tokenizer(text, return_tensors="pt"), output_hidden_states=True)
        x = hidden.hidden_states[2][0].double().numpy()
        for rows, linear in ((qs, attention.query), (ks, attention.key)):
            weight, bias = (
                linear.weight.detach().double().numpy()[columns],
                linear.bias.detach().double().numpy()[columns],
            )
            rows.append(x @ weight.T + bias)
    q, k = np.concatenate(qs), np.concatenate(ks)
    k = k - k.mean(0) + q.mean(0)
    scale = np.sqrt(np.linalg.norm(k, axis=1).mean() / np.linalg.norm(q, axis=1).mean())
    both = np.concatenate([q * scale, k / scale])
    centred = both - both.mean(0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    expected = centred @ axes[:2].T
    points = np.concatenate([found["query"], found["key"]])
    signs = np.sign((points * expected).sum(0))  # a component's sign is arbitrary
    # The model computes q and k in float32; NumPy here in float64 from the same float32 weights and inputs.
    # q and k of block 2: two blocks, then their own projection
    atol = pass_tolerance(minilm.model.config, blocks=3)
    np.testing.assert_allclose(points * signs, expected, atol=atol * largest(expected))
    np.testing.assert_allclose(found["explained"], (singular**2 / (singular**2).sum())[:2], atol=atol)
    assert found["scale"] == pytest.approx(scale, abs=atol * scale)
    assert found["token"][:3] == ["[CLS]", "the", "cat"] and found["position"][:3] == [0, 1, 2]
    assert (
        len(found["query"]) == len(found["sentence"]) == sum(len(minilm.tokenizer(t)["input_ids"]) for t in SENTENCES)
    )


def test_a_heads_queries_and_keys_in_tsne_are_sklearns_tsne_of_the_same_points(lab, minilm):
    """t-SNE of the same translated and scaled points, with the same settings. t-SNE moves far on a change in
    the last bits of its input (2e-6 in q turned a layout around), so q and k are made here as the lab reads
    them: transformers' model on the sentences in one padded batch, block 2's query and key layers on its
    input (the PCA test above checks them against single-sentence passes)."""
    spec = AtlasSpec(minilm.name, minilm.digest, SENTENCES, 1, 2, ablation_sentences=0)
    atlases = Atlases(lab)
    run_async(atlases.start(spec))
    found = run_async(atlases.head_space(spec, 2, 5, Projection("tsne", perplexity=10, seed=3)))
    attention = minilm.model.encoder.layer[2].attention.self
    batch = minilm.tokenizer(list(SENTENCES), return_tensors="pt", padding=True)
    with torch.inference_mode():
        x = minilm.model(**batch, output_hidden_states=True).hidden_states[2]
        q, k = (layer(x)[..., 5 * 32 : 6 * 32].double().numpy() for layer in (attention.query, attention.key))
    lengths = batch["attention_mask"].sum(1).tolist()
    q = np.concatenate([q[row, :length] for row, length in enumerate(lengths)])
    k = np.concatenate([k[row, :length] for row, length in enumerate(lengths)])
    k = k - k.mean(0) + q.mean(0)
    scale = np.sqrt(np.linalg.norm(k, axis=1).mean() / np.linalg.norm(q, axis=1).mean())
    expected = TSNE(n_components=2, perplexity=10, max_iter=500, init="pca", random_state=3).fit_transform(
        np.concatenate([q * scale, k / scale])
    )
    points = np.concatenate([found["query"], found["key"]])
    np.testing.assert_allclose(points, expected, atol=1e-6 * np.abs(expected).max())
    assert found["explained"] == []
