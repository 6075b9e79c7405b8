"""Runs computed together in one padded pass equal the same runs computed alone: every activation, the
pooled vector and the next-token candidates, for mixed lengths, pairs, both masks and switched-off heads,
on MiniLM's tiny random twin and on tiny random models of other families."""

import asyncio
import dataclasses

import pytest
import torch

import app.engine.engine
from app.engine.engine import Engine
from app.engine.errors import NothingToRead
from app.engine.model import load_model
from app.serving.gate import Client
from app.serving.memory import RESERVE
from app.web.api import view_answer
from app.web.schemas.runs import AttentionView
from tests.conftest import make_lab, run_async
from tests.families import build
from tests.float32 import largest, pass_tolerance

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


def assert_same(batched, alone, config):
    """A padded pass's numbers against the run's pass alone: the same sums in other orders."""
    assert [token.id for token in batched.tokens] == [token.id for token in alone.tokens]
    assert batched.activations.keys() == alone.activations.keys()
    for name, value in alone.activations.items():
        atol = pass_tolerance(config, largest(value))
        torch.testing.assert_close(batched.activations[name], value, atol=atol, rtol=0, msg=name)
    torch.testing.assert_close(batched.pooled, alone.pooled, atol=pass_tolerance(config, largest(alone.pooled)), rtol=0)
    if alone.next_tokens is not None:
        logits = alone.next_tokens[1]
        atol = pass_tolerance(config, largest(logits))
        torch.testing.assert_close(batched.next_tokens[1], logits, atol=atol, rtol=0)
        # The best five's ids, the same but where two neighbours' logits tie within float rounding: there the
        # two passes may order them either way.
        close = (logits[:, 1:] - logits[:, :-1]).abs() <= 2 * atol
        tied = torch.nn.functional.pad(close, (1, 0)) | torch.nn.functional.pad(close, (0, 1))
        differ = batched.next_tokens[0][:, :5] != alone.next_tokens[0][:, :5]
        assert not (differ & ~tied[:, :5]).any(), "a next token's rank moved by more than float rounding"


# mistral: GQA, RoPE and a window; modernbert and embeddinggemma: a mask per block type, windows on either side
@pytest.fixture(scope="module", params=["tiny", "gpt2", "mistral", "mpnet", "modernbert", "embeddinggemma", "gemma3"])
def engine(request, tmp_path_factory):
    if request.param == "tiny":
        return Engine(request.getfixturevalue("tiny"), 10_000)
    return Engine(load_model(build(request.param, tmp_path_factory.mktemp(request.param))), 10_000)


def test_a_batch_gives_every_run_its_numbers_alone(engine, monkeypatch):
    passes = []
    real = app.engine.engine.capture_batch

    def counted(model, family, sequences, ablate=(), weights_made=None):
        passes.append((len(sequences), ablate))
        return real(model, family, sequences, ablate, weights_made)

    made = specs(engine, not engine.loaded.family.decoder)
    monkeypatch.setattr(app.engine.engine, "capture_batch", counted)
    batched = engine.compute_batch(made)
    # One pass per set of switched-off heads: three here.
    assert sorted(ablate for _, ablate in passes) == [(), ((0, 1), (1, 3)), ((1, 2),)]
    assert sum(size for size, _ in passes) == len(made)
    monkeypatch.setattr(app.engine.engine, "capture_batch", real)
    for spec, run in zip(made, batched, strict=True):
        assert run.spec == spec
        assert_same(run, engine.compute(spec), engine.loaded.model.config)


def test_a_padded_runs_block_computed_again_is_the_one_its_pass_made(engine, monkeypatch):
    """The weights an eager pass hands on for a row it padded, and the same block computed again from q and k
    once they are let go: the same bits, as the block is computed again at the pass's padded length
    (Run.padded_to). At the run's own length a third of a class burst's blocks differed in the last bit."""
    runs = [run for run in engine.compute_batch(specs(engine, not engine.loaded.family.decoder)) if run.padded_to]
    assert runs, "no run of the batch was padded"
    kept = {(run.run_id, layer): run.kept_weights(layer) for run in runs for layer in range(run.n_layers)}
    assert all(block is not None for block in kept.values())
    monkeypatch.setattr(engine.blocks, "max_bytes", 0)
    engine.blocks.put("another run", 0, torch.zeros(1))  # every block let go
    for run in runs:
        for layer in range(run.n_layers):
            # bit for bit: same shapes (the block computed again at the pass's padded length)
            assert torch.equal(run.weights(layer), kept[run.run_id, layer]), (run.spec.text, layer)


def test_a_pass_is_capped_by_padded_tokens_and_one_bad_input_fails_alone(tiny, monkeypatch):
    engine = Engine(tiny, 10_000)
    passes = []
    real = app.engine.engine.capture_batch
    monkeypatch.setattr(
        app.engine.engine,
        "capture_batch",
        lambda m, f, s, *rest: passes.append([len(x.input_ids) for x in s]) or real(m, f, s, *rest),
    )
    long = " ".join(["word"] * 300)
    made = [engine.spec(text) for text in ("short one", long, "\u200b", "another short one")]
    outcomes = engine.compute_batch(made, max_tokens=512)
    assert isinstance(outcomes[2], NothingToRead)
    assert all(
        run.spec == spec
        for run, spec in zip([outcomes[0], outcomes[1], outcomes[3]], [made[0], made[1], made[3]], strict=True)
    )
    # The two short ones share a pass; the long one (302 tokens) goes alone under a 512-token cap.
    assert sorted(passes) == [[4, 5], [302]]


def recorded_batches(lab, monkeypatch) -> list[list[str]]:
    """The texts of each batch the lab's engine computes, in order."""
    batches, real = [], lab.engine.compute_batch

    def recording(specs, *args):
        batches.append([spec.text for spec in specs])
        return real(specs, *args)

    monkeypatch.setattr(lab.engine, "compute_batch", recording)
    return batches


def queue_behind_a_held_turn(lab, requests):
    """Holds the lab's only turn while every (text, client) request queues, then lets go: their runs."""

    async def main():
        async with lab.gate.admit():
            tasks = [asyncio.create_task(lab.serve_spec(lab.spec(text), client)) for text, client in requests]
            while lab.gate.waiting < len(requests):
                await asyncio.sleep(0.01)
        return await asyncio.gather(*tasks)

    return run_async(main())


def test_requests_waiting_together_share_a_pass_with_their_own_numbers(tiny, tmp_path, monkeypatch):
    lab = make_lab(tiny, tmp_path)
    batches = recorded_batches(lab, monkeypatch)
    requests = [(text, Client(f"10.0.0.{number}")) for number, text in enumerate(TEXTS)]
    runs = queue_behind_a_held_turn(lab, requests)
    assert batches == [TEXTS]  # the first to get the turn took the others along, in turn order
    engine = Engine(tiny, 10_000)
    for run, text in zip(runs, TEXTS, strict=True):
        assert_same(run, engine.compute(engine.spec(text)), tiny.model.config)


def test_a_batch_is_filled_in_fair_order_not_by_one_clients_flood(tiny, tmp_path, monkeypatch):
    lab = make_lab(tiny, tmp_path)
    lab.works.max_batch = 2
    batches = recorded_batches(lab, monkeypatch)
    hog, b, c = Client("10.0.0.1"), Client("10.0.0.2"), Client("10.0.0.3")
    queue_behind_a_held_turn(lab, [("hog 1", hog), ("hog 2", hog), ("hog 3", hog), ("b 1", b), ("c 1", c)])
    # Each address first once, new as they all are (the hog's first), then the round, where the hog's others wait,
    # every other turn (app.serving.gate.Rotation): hog 2 before c 1, hog 3 last.
    assert batches == [["hog 1", "b 1"], ["hog 2", "c 1"], ["hog 3"]]


def test_a_lone_request_runs_at_once_and_alone(tiny, tmp_path, monkeypatch):
    lab = make_lab(tiny, tmp_path)
    batches = recorded_batches(lab, monkeypatch)
    run_async(lab.serve_spec(lab.spec("all alone")))
    assert batches == [["all alone"]] and lab.gate.waiting == 0


def test_requests_arriving_together_at_an_idle_lab_share_its_first_pass(tiny, tmp_path, monkeypatch):
    """A class pressing Enter at once: the first request finds the model free, and its pass takes the others
    that arrived with it (Lab._arrivals) instead of running alone before them."""
    lab = make_lab(tiny, tmp_path)
    batches = recorded_batches(lab, monkeypatch)

    async def together():
        clients = [Client(f"10.0.0.{number}") for number in range(len(TEXTS))]
        asking = [lab.serve_spec(lab.spec(text), c) for text, c in zip(TEXTS, clients, strict=True)]
        return await asyncio.gather(*asking)

    runs = run_async(together())
    assert batches == [TEXTS] and [run.spec.text for run in runs] == TEXTS


CLASS = [
    f"learner {number} asks why the {word} sat where it did"
    for number, word in enumerate("cat dog fox owl bee ant".split())
] + [f"a much longer question, number {number}, about what the river bank was like that day" for number in range(6)]


def test_a_bursts_views_compute_nothing_while_the_budget_keeps_its_passs_weights(minilm, tmp_path, monkeypatch):
    """A class's burst: one batched pass, which hands its weights on, so each learner's all-heads attention
    computes no block while the budget has room for them. When work needs the room, the blocks go first (the
    runs stay), and the views, asking at once, compute them again together in one turn at the model: the same
    float32 bytes, since a padded run's block is computed again as its pass made it (Run.padded_to)."""
    lab = make_lab(minilm, tmp_path, max_runs=64)
    batches = recorded_batches(lab, monkeypatch)
    clients = [Client(f"10.0.1.{number}") for number in range(len(CLASS))]

    async def burst():
        asking = [lab.serve_spec(lab.spec(text), c) for text, c in zip(CLASS, clients, strict=True)]
        return await asyncio.gather(*asking)

    async def views(runs):
        exact = AttentionView(dtype="float32")  # every head of every block, every bit of each weight
        answers = await asyncio.gather(*(view_answer(run, lab, exact, c) for run, c in zip(runs, clients, strict=True)))
        return [b"".join(pieces) for pieces, _ in answers]

    async def views_beside_work_that_needs_the_room(runs):
        # Two other clients' work takes all the budget the runs leave to large work (all but its reserve for
        # small asks, RESERVE): the blocks go, the runs stay.
        room = lab.budget.max_bytes - lab.budget.max_bytes // RESERVE
        need = room - (lab.budget.held - lab.blocks.nbytes)
        async with (
            lab.budget.take(need // 2, Client("10.0.2.1")),
            lab.budget.take(need - need // 2, Client("10.0.2.2")),
        ):
            assert lab.blocks.nbytes == 0 and all(lab.kept(run.spec) is run for run in runs)
        return await views(runs)

    runs = run_async(burst())
    assert batches == [CLASS] and len({len(run.tokens) for run in runs}) > 1  # one pass, padded
    turns, real = [], lab.works.threads.run
    monkeypatch.setattr(lab.works.threads, "run", lambda work, *args: turns.append(work) or real(work, *args))
    bodies = run_async(views(runs))
    assert lab.blocks.computed == 0 and turns == []
    assert run_async(views_beside_work_that_needs_the_room(runs)) == bodies
    # Computed again, every view's six blocks in one turn at the model, all the class's together.
    assert lab.blocks.computed == len(runs) * 6 and len(turns) == 1


def test_a_long_input_takes_its_turn_alone(tiny, tmp_path, monkeypatch):
    """A turn computes at most one full-length input's worth of padded tokens."""
    lab = make_lab(tiny, tmp_path, max_chars=100_000)
    batches = recorded_batches(lab, monkeypatch)
    long = " ".join(["word"] * 600)
    requests = [("short", Client("10.0.0.1")), (long, Client("10.0.0.2")), ("also short", Client("10.0.0.3"))]
    queue_behind_a_held_turn(lab, requests)
    # The short passes, new to the gate, go before the long one (PassGate.admit's `short`), and share a turn.
    assert batches == [["short", "also short"], [long]]


def texts_of(engine, tokens: int, count: int, tag: str) -> list[str]:
    """`count` different texts of exactly `tokens` tokens, [CLS] and [SEP] included."""
    prefixes = [f"{tag} {number}" for number in range(count)]
    texts = [f"{prefix} " + " ".join(["river"] * (tokens - engine.length(engine.spec(prefix)))) for prefix in prefixes]
    assert {engine.length(engine.spec(text)) for text in texts} == {tokens}
    return texts


def test_short_prompts_share_a_turn_up_to_one_pass_of_padded_tokens(tiny, tmp_path, monkeypatch):
    """A class's prompts take as few turns as fit in the engine's pass (BATCH_TOKENS = 2048 padded tokens):
    forty-token prompts, 51 to a turn."""
    lab = make_lab(tiny, tmp_path, max_runs=64)
    lab.works.max_batch = 1_000
    batches = recorded_batches(lab, monkeypatch)
    texts = texts_of(lab.engine, 40, 60, "learner")
    queue_behind_a_held_turn(
        lab, [(text, Client(f"10.0.{number // 4}.{number % 4}")) for number, text in enumerate(texts)]
    )
    assert [len(batch) for batch in batches] == [51, 9]
    assert [text for batch in batches for text in batch] == texts  # in turn order


def test_an_input_over_a_quarter_of_the_positions_takes_its_turn_alone(tiny, tmp_path, monkeypatch):
    lab = make_lab(tiny, tmp_path)
    batches = recorded_batches(lab, monkeypatch)
    (over,) = texts_of(lab.engine, 512 // 4 + 1, 1, "over")  # the tiny BERT has 512 positions
    (quarter,) = texts_of(lab.engine, 512 // 4, 1, "quarter")
    requests = [("short", Client("10.0.0.1")), (over, Client("10.0.0.2")), (quarter, Client("10.0.0.3"))]
    queue_behind_a_held_turn(lab, [*requests, ("also short", Client("10.0.0.4"))])
    # The passes of at most 128 tokens, new to the gate, go first (PassGate.admit's `short`) and share a turn.
    assert batches == [["short", quarter, "also short"], [over]]


def test_the_runs_of_a_pass_are_put_in_the_shared_store_in_one_write(tiny, tmp_path, monkeypatch):
    lab = make_lab(tiny, tmp_path)
    writes, real = [], lab.specs.put
    monkeypatch.setattr(lab.specs, "put", lambda *specs: writes.append(len(specs)) or real(*specs))
    requests = [(text, Client(f"10.0.0.{number}")) for number, text in enumerate(TEXTS)]
    runs = queue_behind_a_held_turn(lab, requests)
    assert writes == [len(TEXTS)]
    assert [lab.specs.get(run.run_id) for run in runs] == [run.spec for run in runs]


def test_each_input_is_read_once_by_the_lab_that_states_its_pass_and_joins_its_batch(tiny, tmp_path, monkeypatch):
    """An input read to state its pass's memory (a long one) or to join a waiting batch is not read again by
    its pass: the pass takes the tokens read ahead, and they are the tokens it would have read."""
    lab = make_lab(tiny, tmp_path, max_chars=100_000)
    reads = []

    class CountedTokenizer:
        def __call__(self, text, *args, **kwargs):
            reads.append(text)
            return tiny.tokenizer(text, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(tiny.tokenizer, name)

    monkeypatch.setattr(lab.engine, "loaded", dataclasses.replace(tiny, tokenizer=CountedTokenizer()))
    long = " ".join(["river"] * 300)  # past SHORT_TOKENS bytes: read on the event loop before its turn
    requests = [(long, Client("10.0.0.1")), *((text, Client(f"10.0.1.{n}")) for n, text in enumerate(CLASS))]
    runs = queue_behind_a_held_turn(lab, requests)
    assert sorted(reads) == sorted(text for text, _ in requests)
    for run in runs:
        assert run.tokens == Engine(tiny, 100_000).tokenize(run.spec.text)[0]


def test_the_tokens_read_ahead_are_bounded(tiny):
    engine = Engine(tiny, 100_000)
    count = 2 * app.engine.engine.READ_AHEAD_TOKENS // 400
    for text in (f"text {number} " + " ".join(["river"] * 400) for number in range(count)):
        assert engine.read_ahead(engine.spec(text)) == engine.length(engine.spec(text))
    kept = sum(len(tokens) for tokens, _ in engine._read_ahead.values())
    assert app.engine.engine.READ_AHEAD_TOKENS - 402 < kept <= app.engine.engine.READ_AHEAD_TOKENS
