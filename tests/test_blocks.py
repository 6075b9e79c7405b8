"""A run keeps what is linear in its tokens; its blocks of weights are computed when asked, kept in a cache
bounded in bytes, and computed again with the same numbers once it has let them go. On the packaged MiniLM,
against transformers' output_attentions; and on a tiny Llama-style decoder of 4,096 positions."""

import pytest
import torch

from app.engine import capture
from app.engine.blocks import BlockCache
from app.engine.engine import Engine
from app.engine.model import load_model
from tests.conftest import make_lab, run_async
from tests.families import long_llama
from tests.float32 import pass_tolerance

TEXT = "The river bank was steep, and the tired animal rested on the bank of the river."


def test_a_run_keeps_no_quadratic_tensor(minilm):
    engine = Engine(minilm, max_chars=1000)
    run = engine.compute(engine.spec(TEXT))
    n = len(run.tokens)
    assert not [name for name in run.activations if name.endswith(".weights")]
    assert all(list(tensor.shape).count(n) == 1 for tensor in run.activations.values())
    # What it keeps: per block q, k, v and context ([head, pos, d_head] each) and five rows of d_model or
    # d_ffn per token, the embeddings' rows, and the pooled states: bytes linear in n.
    config = minilm.model.config
    d, ffn, blocks = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_token = 4 * (blocks * (4 * d + 4 * d + ffn) + 5 * d)
    assert sum(run.storages.values()) == n * per_token


def test_a_block_is_computed_once_while_kept_and_again_the_same_after_it_is_let_go(minilm):
    n_heads = minilm.model.config.num_attention_heads
    engine = Engine(minilm, max_chars=1000, blocks=BlockCache(max_bytes=0))
    run = engine.compute(engine.spec(TEXT))
    n = len(run.tokens)
    block_bytes = n_heads * n * n * 4
    engine.blocks.max_bytes = 2 * block_bytes  # two blocks fit, not three
    ids = torch.tensor([[token.id for token in run.tokens]])
    reference = minilm.model(input_ids=ids, output_attentions=True).attentions

    first = run.weights(0)
    assert torch.equal(first, reference[0][0])  # bit for bit: same shapes (the model's own lone pass)
    assert run.weights(0) is first and engine.blocks.computed == 1  # kept: not computed again
    run.weights(1), run.weights(2)  # block 0 is the least recently used of three: let go
    assert engine.blocks.nbytes == 2 * block_bytes and run.kept_weights(0) is None
    assert engine.blocks.computed == 3
    again = run.weights(0)
    assert again is not first and engine.blocks.computed == 4
    assert torch.equal(again, first)  # bit for bit: same shapes (the same block computed again)
    engine.blocks.max_bytes = block_bytes - 1  # a block larger than the bound is answered, not kept
    assert torch.equal(run.weights(3), reference[3][0])  # bit for bit: same shapes (the model's own lone pass)
    assert engine.blocks.nbytes == 0
    assert run.kept_weights(3) is None


def test_the_bytes_a_run_holds_grow_linearly_with_its_tokens(minilm):
    engine = Engine(minilm, max_chars=100_000)
    held = {}
    for words in (60, 120, 240):
        run = engine.compute(engine.spec(" ".join(["river"] * words)))
        held[len(run.tokens)] = sum(run.storages.values())
    (n1, b1), (n2, b2), (n3, b3) = sorted(held.items())
    assert n1 < n2 < n3 and b1 / n1 == b2 / n2 == b3 / n3  # the same bytes per token at every length


@pytest.fixture(scope="module")
def long_llama_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("long-llama")
    long_llama(folder, positions=4096)
    return load_model(folder)


def test_a_long_decoder_run_keeps_its_formulas_bytes_and_its_fused_weights_are_the_models(long_llama_model):
    """1,522 tokens of a 4-block, 8-head Llama: its pass is fused (each block's eager weights would be
    over 64 MiB), the run keeps exactly docs/capture.md's formula, and every block's computed weights equal the
    eager output_attentions to float rounding, block 0's bit for bit."""
    loaded = long_llama_model
    engine = Engine(loaded, max_chars=100_000)
    run = engine.compute(engine.spec(" ".join(["the cat sat on the mat", "a quick brown fox jumps"] * 80)))
    n, config = len(run.tokens), loaded.model.config
    assert 8 * n**2 * 4 > capture.FUSED_FROM_BYTES
    blocks, width, ffn = config.num_hidden_layers, config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads * (config.hidden_size // config.num_attention_heads)
    assert sum(run.storages.values()) == 4 * n * (blocks * (4 * heads + 4 * width + ffn) + 2 * width) + 16 * n * 20
    with torch.inference_mode():
        reference = loaded.model(input_ids=torch.tensor([[t.id for t in run.tokens]]), output_attentions=True)
    # bit for bit: same shapes (block 0's q and k: the same projections of the same embeddings)
    assert torch.equal(run.weights(0), reference.attentions[0][0])
    for layer in range(1, blocks):
        atol = pass_tolerance(config)
        torch.testing.assert_close(run.weights(layer), reference.attentions[layer][0], atol=atol, rtol=0)


def test_the_lab_keeps_the_blocks_its_pass_made_and_computes_one_let_go_once_within_its_share(minilm, tmp_path):
    lab = make_lab(minilm, tmp_path)
    run = lab.run_sync(lab.spec(TEXT))
    # The eager pass made every block's weights anyway: they are kept, and no view computes them.
    everything = run_async(lab.measured(run, "weights", None))
    assert lab.blocks.computed == 0 and all(run.kept_weights(layer) is not None for layer in range(6))
    alone = Engine(minilm, max_chars=1000, blocks=BlockCache(max_bytes=0)).compute(lab.spec(TEXT))
    # bit for bit: same shapes (two lone passes of the text)
    assert all(torch.equal(everything[layer], alone.weights(layer)) for layer in range(6))
    lab.blocks.max_bytes = 0  # let go of them all: a view computes a block once, then keeps it
    lab.blocks.put("another run", 0, torch.zeros(1))
    lab.blocks.max_bytes = 10**9 // 4
    first = run_async(lab.measured(run, "weights", 2))
    again = run_async(lab.measured(run, "weights", 2))
    assert first[0] is again[0] and lab.blocks.computed == 1
    assert torch.equal(first[0], everything[2])  # bit for bit: same shapes (from the pass's own q and k)
    # One bound in bytes for what the lab keeps: a quarter for blocks of weights, the rest for runs.
    assert (lab.blocks.max_bytes, lab.runs.max_bytes) == (10**9 // 4, 10**9 - 10**9 // 4)


def test_a_padded_row_of_a_batch_keeps_its_passs_own_block(minilm):
    """A padded pass's weights are kept too, each row's cut to its own tokens: each row's equal its pass alone
    to float rounding (tests/float32.py: the batch sums in other orders than a pass alone, the longest row's
    too), and a shorter row's equal what its q and k give when the block is computed again bit for bit
    (computed at the pass's padded length, Run.padded_to)."""
    engine = Engine(minilm, max_chars=1000)
    long, short = engine.compute_batch([engine.spec(TEXT), engine.spec("a short one")])
    alone = Engine(minilm, max_chars=1000, blocks=BlockCache(max_bytes=0))
    atol = pass_tolerance(minilm.model.config)
    for layer in range(6):
        torch.testing.assert_close(long.kept_weights(layer), alone.compute(long.spec).weights(layer), atol=atol, rtol=0)
    ids = torch.tensor([[token.id for token in short.tokens]])
    with torch.inference_mode():
        reference = minilm.model(input_ids=ids, output_attentions=True).attentions
    kept = [short.kept_weights(layer) for layer in range(6)]
    engine.blocks.max_bytes = 0
    engine.blocks.put("another run", 0, torch.zeros(1))  # every block let go: computed again from q and k
    for layer in range(6):
        assert kept[layer].shape == (12, len(short.tokens), len(short.tokens))
        torch.testing.assert_close(kept[layer], reference[layer][0], atol=atol, rtol=0)
        assert torch.equal(short.weights(layer), kept[layer])  # bit for bit: same shapes (at the padded length)
