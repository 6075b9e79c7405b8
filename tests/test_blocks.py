"""A run keeps what is linear in its tokens; its blocks of weights are computed when asked, kept in a cache
bounded in bytes, and computed again with the same numbers once it has let them go. On the packaged MiniLM,
against transformers' output_attentions."""

import torch

from app.engine.blocks import BlockCache
from app.engine.runs import Engine

TEXT = "The river bank was steep, and the tired animal rested on the bank of the river."


def test_a_run_keeps_no_quadratic_tensor(minilm):
    engine = Engine(minilm, max_chars=1000)
    run = engine.run(engine.spec(TEXT))
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
    run = engine.run(engine.spec(TEXT))
    n = len(run.tokens)
    block_bytes = n_heads * n * n * 4
    engine.blocks.max_bytes = 2 * block_bytes  # two blocks fit, not three
    ids = torch.tensor([[token.id for token in run.tokens]])
    reference = minilm.model(input_ids=ids, output_attentions=True).attentions

    first = run.weights(0)
    assert torch.equal(first, reference[0][0])  # bitwise the model's own (block 0 reads the embeddings)
    assert run.weights(0) is first and engine.blocks.computed == 1  # kept: not computed again
    run.weights(1), run.weights(2)  # block 0 is the least recently used of three: let go
    assert engine.blocks.nbytes == 2 * block_bytes and run.kept_weights(0) is None
    assert engine.blocks.computed == 3
    again = run.weights(0)
    assert again is not first and engine.blocks.computed == 4
    assert torch.equal(again, first)


def test_the_bytes_a_run_holds_grow_linearly_with_its_tokens(minilm):
    engine = Engine(minilm, max_chars=100_000)
    held = {}
    for words in (60, 120, 240):
        run = engine.run(engine.spec(" ".join(["river"] * words)))
        held[len(run.tokens)] = sum(run.storages.values())
    (n1, b1), (n2, b2), (n3, b3) = sorted(held.items())
    assert n1 < n2 < n3 and b1 / n1 == b2 / n2 == b3 / n3  # the same bytes per token at every length
