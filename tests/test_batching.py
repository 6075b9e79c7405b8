"""Runs computed together in one padded pass equal the same runs computed alone: every activation, the
pooled vector and the next-token candidates, for mixed lengths, pairs, both masks and switched-off heads,
on MiniLM's tiny random twin and on tiny random models of other families."""

import pytest
import torch

import app.engine.runs
from app.engine.model import load_model
from app.engine.runs import Engine, NothingToRead
from tests.families import build

TEXTS = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog and the cat, said the paper!",
    "Attention",
    "The river bank was steep and the animal was tired. The cat sat on the mat. A quick brown fox.",
]


def specs(engine, encoder: bool):
    made = [engine.spec(text) for text in TEXTS]
    made += [engine.spec(TEXTS[0], ablate=[(1, 2)]), engine.spec(TEXTS[1], ablate=[(1, 2)])]
    made += [engine.spec(TEXTS[2], ablate=[(0, 1), (1, 3)])]
    if encoder:
        made += [
            engine.spec(TEXTS[1], mask="causal"),
            engine.spec(TEXTS[0], TEXTS[2]),
            engine.spec(TEXTS[3], mask="causal"),
        ]
    return made


def assert_same(batched, alone):
    assert [token.id for token in batched.tokens] == [token.id for token in alone.tokens]
    assert batched.activations.keys() == alone.activations.keys()
    for name, value in alone.activations.items():
        torch.testing.assert_close(batched.activations[name], value, atol=1e-5, rtol=0, msg=name)
    torch.testing.assert_close(batched.pooled, alone.pooled, atol=1e-5, rtol=0)
    if alone.next_tokens is not None:
        assert torch.equal(batched.next_tokens[0][:, :5], alone.next_tokens[0][:, :5])
        torch.testing.assert_close(batched.next_tokens[1], alone.next_tokens[1], atol=1e-5, rtol=0)


@pytest.fixture(scope="module", params=["tiny", "gpt2", "llama", "mpnet"])
def engine(request, tmp_path_factory):
    if request.param == "tiny":
        return Engine(request.getfixturevalue("tiny"), 10_000)
    return Engine(load_model(build(request.param, tmp_path_factory.mktemp(request.param))), 10_000)


def test_a_batch_gives_every_run_its_numbers_alone(engine, monkeypatch):
    passes = []
    real = app.engine.runs.capture_batch

    def counted(model, family, sequences, ablate=()):
        passes.append((len(sequences), ablate))
        return real(model, family, sequences, ablate)

    made = specs(engine, not engine.loaded.family.decoder)
    monkeypatch.setattr(app.engine.runs, "capture_batch", counted)
    batched = engine.run_batch(made)
    # One pass per set of switched-off heads: three here.
    assert sorted(ablate for _, ablate in passes) == [(), ((0, 1), (1, 3)), ((1, 2),)]
    assert sum(size for size, _ in passes) == len(made)
    monkeypatch.setattr(app.engine.runs, "capture_batch", real)
    for spec, run in zip(made, batched, strict=True):
        assert run.spec == spec
        assert_same(run, engine.run(spec))


def test_a_pass_is_capped_by_padded_tokens_and_one_bad_input_fails_alone(tiny, monkeypatch):
    engine = Engine(tiny, 10_000)
    passes = []
    real = app.engine.runs.capture_batch
    monkeypatch.setattr(
        app.engine.runs,
        "capture_batch",
        lambda m, f, s, a=(): passes.append([len(x.input_ids) for x in s]) or real(m, f, s, a),
    )
    long = " ".join(["word"] * 300)
    made = [engine.spec(text) for text in ("short one", long, "\u200b", "another short one")]
    outcomes = engine.run_batch(made, max_tokens=512)
    assert isinstance(outcomes[2], NothingToRead)
    assert all(
        run.spec == spec
        for run, spec in zip([outcomes[0], outcomes[1], outcomes[3]], [made[0], made[1], made[3]], strict=True)
    )
    # The two short ones share a pass; the long one (302 tokens) goes alone under a 512-token cap.
    assert sorted(passes) == [[4, 5], [302]]
