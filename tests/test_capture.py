"""The hooked capture on a tiny random BERT, checked against the model's own outputs."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from app.engine.capture import (
    additive_mask,
    attention_scores,
    capture,
    hook_table,
    recording,
    thread_hooks,
)
from app.engine.engine import Engine
from tests.float32 import largest, pass_tolerance, product_tolerance

TEXT = "the river bank was steep"


def encode(loaded, text=TEXT):
    ids = torch.tensor(loaded.tokenizer(text)["input_ids"])
    return ids, torch.zeros_like(ids)


def captured(loaded, ids, types, mask):
    return capture(loaded.model, loaded.family, ids, types, mask)[0]


def run_of(loaded, mask, text=TEXT):
    """A run of the engine: its weights computed per block from q and k (Run.weights)."""
    engine = Engine(loaded, max_chars=1000)
    return engine.compute(engine.spec(text, mask=mask))


def test_activation_names_are_pinned(tiny):
    ids, types = encode(tiny)
    names = list(captured(tiny, ids, types, "bidirectional"))
    block = [
        "attn.q",
        "attn.k",
        "attn.v",
        "attn.context",
        "attention_output",
        "resid_mid",
        "ffn_intermediate",
        "ffn_output",
        "output",
    ]
    expected = [
        "embeddings.word",
        "embeddings.token_type",
        "embeddings.position",
        "embeddings.sum",
        "embeddings.normalized",
    ] + [f"blocks.{layer}.{name}" for layer in range(2) for name in block]
    assert sorted(names) == sorted(expected)
    assert len(names) == len(expected)


def test_hooked_modules_are_the_models_own(tiny):
    modules = dict(tiny.model.named_modules())
    hooked = [path for path, _, _ in hook_table(tiny.family, tiny.model.config)]
    assert all(path in modules for path in hooked)
    assert "encoder.layer.1.attention.output.dense" in hooked


def hook_count(model):
    return sum(len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules())


def test_the_recording_hooks_go_on_once_and_record_only_this_threads_passes_inside_the_block(tiny):
    """Put on at a model's first recording and kept (recording): a pass of another thread meanwhile, and one
    after the block, even a block whose pass failed, records nothing."""
    ids, types = encode(tiny)
    captured(tiny, ids, types, "causal")
    hooks = hook_count(tiny.model)

    def forward():
        with torch.inference_mode():
            tiny.model(ids[None])

    with pytest.raises(RuntimeError), recording(tiny.model, tiny.family) as recorded, ThreadPoolExecutor(1) as other:
        other.submit(forward).result()
        assert recorded == {}
        forward()
        assert "blocks.1.output" in recorded
        recorded.clear()
        raise RuntimeError("a forward pass that fails")
    forward()
    assert recorded == {}
    captured(tiny, ids, types, "bidirectional")
    assert hook_count(tiny.model) == hooks


def test_the_weights_are_not_recorded_but_computed_equal_to_output_attentions(tiny):
    ids, types = encode(tiny)
    assert not [name for name in captured(tiny, ids, types, "bidirectional") if name.endswith(".weights")]
    run = run_of(tiny, "bidirectional")
    reference = tiny.model(input_ids=ids[None], output_attentions=True)
    for layer, weights in enumerate(reference.attentions):
        assert torch.equal(run.weights(layer), weights[0])  # bit for bit: same shapes (the model's own lone pass)
    last = reference.last_hidden_state[0]
    atol = pass_tolerance(tiny.model.config, largest(last.detach()))
    torch.testing.assert_close(run.activations["blocks.1.output"], last, atol=atol, rtol=0)


def test_scores_softmax_to_weights_and_context_is_weighted_values(tiny):
    ids, types = encode(tiny)
    for mask in ("bidirectional", "causal"):
        run = run_of(tiny, mask)
        acts = run.activations
        for layer in range(2):
            q, k, v = (acts[f"blocks.{layer}.attn.{name}"] for name in "qkv")
            assert q.shape == (4, len(ids), 12)  # [head, pos, d_head]
            scores = attention_scores(q, k, additive_mask(mask, len(ids)), q.shape[-1] ** -0.5)
            weights = run.weights(layer)
            # a weight moves by at most half its scores' error (softmax), which come from sums of d_head terms
            atol = product_tolerance(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))
            torch.testing.assert_close(scores.softmax(-1), weights, atol=atol, rtol=0)
            atol = product_tolerance(weights, v)
            torch.testing.assert_close(weights @ v, acts[f"blocks.{layer}.attn.context"], atol=atol, rtol=0)


def test_causal_mask_hides_the_future_exactly(tiny):
    ids, types = encode(tiny)
    weights = run_of(tiny, "causal").weights(1)
    assert torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, len(ids)))
    assert weights[:, 0, 0].eq(1).all()  # the first token can only look at itself


def test_causal_matches_a_decoder_configured_model(tiny):
    """The same weights run as a decoder (transformers' own causal mask) give the same causal weights."""
    ids, types = encode(tiny)
    run = run_of(tiny, "causal")
    tiny.model.config.is_decoder = True
    try:
        reference = tiny.model(input_ids=ids[None], output_attentions=True, use_cache=False)
    finally:
        tiny.model.config.is_decoder = False
    for layer, weights in enumerate(reference.attentions):
        torch.testing.assert_close(run.weights(layer), weights[0], atol=pass_tolerance(tiny.model.config), rtol=0)


def test_thread_hooks_act_in_their_own_threads_passes_only_and_are_gone_after(tiny):
    """What the zeroing of heads, patching and the scoreboard's removals stand on: a pass on another thread at
    the same time is not touched."""
    block = tiny.model.base_model.get_submodule(f"{tiny.family.blocks}.0")
    ids, _ = encode(tiny)

    def forward():
        with torch.inference_mode():
            tiny.model(ids[None])

    # transformers may keep hooks of its own on a block (output capturing): ours must leave exactly those.
    others = (dict(block._forward_hooks), dict(block._forward_pre_hooks))
    seen = []
    with thread_hooks() as hook, ThreadPoolExecutor(1) as other:
        hook(block, lambda module, args, out: seen.append("after"))
        hook(block, lambda module, args, kwargs: seen.append("before"), before=True, with_kwargs=True)
        other.submit(forward).result()
        assert seen == []
        forward()
        assert seen == ["before", "after"]
    forward()
    assert seen == ["before", "after"] and (dict(block._forward_hooks), dict(block._forward_pre_hooks)) == others
