"""Encoder-decoders (T5, BART, Marian) on tiny random folders built here: every kind of attention (the encoder's,
the decoder's, the cross-attention) equals transformers' eager pass with output_attentions, read from the folder
anew; a written target equals generate(do_sample=False); the names are pinned; the memory stated before a run
holds what it keeps and makes."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from app.engine import names
from app.engine.encoder_decoder import KINDS, EncoderDecoderEngine, kept_bytes, run_bytes
from app.engine.errors import InvalidInput, TextTooLong
from app.engine.model import load_model
from tests import families
from tests.float32 import tolerance

BUILDERS = {"t5": families.t5, "bart": families.bart, "marian": families.marian}
SOURCE = "The cat sat on the mat."
TARGET = "A quick brown fox jumps over the lazy dog!"
WRITTEN = 12  # new tokens a written target may take: a step is a pass, and a random model rarely ends sooner


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}
    for kind, build in BUILDERS.items():
        made[kind] = tmp_path_factory.mktemp(kind)
        build(made[kind])
    return made


@pytest.fixture(scope="module")
def engines(folders):
    return {kind: EncoderDecoderEngine(load_model(folder), max_chars=2000) for kind, folder in folders.items()}


@pytest.fixture(scope="module")
def references(folders):
    """transformers' own reading of each folder, eager attention: the independent computation."""
    return {
        kind: (
            AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval(),
            AutoTokenizer.from_pretrained(folder),
        )
        for kind, folder in folders.items()
    }


def attention_tolerance(config) -> float:
    """A weight at the end of both stacks: the errors of every block's longest sum."""
    blocks = config.encoder_layers + config.decoder_layers if hasattr(config, "encoder_layers") else None
    blocks = blocks or config.num_layers + config.num_decoder_layers
    widest = max(config.d_model, getattr(config, "d_ff", 0) or config.encoder_ffn_dim)
    return tolerance(blocks * widest)


@pytest.mark.parametrize("kind", BUILDERS)
@pytest.mark.parametrize("target", [TARGET, None], ids=["given", "written"])
def test_every_attention_is_transformers_eager_pass(kind, target, engines, references):
    engine = engines[kind]
    run = engine.compute(engine.pair_spec(SOURCE, target, None if target else WRITTEN))
    model, tokenizer = references[kind]
    source_ids = tokenizer(SOURCE, return_tensors="pt")["input_ids"]
    if target is None:
        expected = model.generate(source_ids, do_sample=False, num_beams=1, max_new_tokens=run.spec.max_new_tokens)
        assert [token.id for token in run.target] == expected[0].tolist()
    else:
        start = model.generation_config.decoder_start_token_id
        assert [token.id for token in run.target] == [start, *tokenizer(text_target=target)["input_ids"]]
    assert [token.id for token in run.source] == source_ids[0].tolist()
    with torch.inference_mode():
        out = model(
            input_ids=source_ids,
            decoder_input_ids=torch.tensor([[token.id for token in run.target]]),
            output_attentions=True,
        )
    expected = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    bound = attention_tolerance(model.config)
    for which in KINDS:
        assert run.layers(which) == len(expected[which])
        for layer, weights in enumerate(expected[which]):
            ours = run.weights(which, layer)
            assert ours.shape == weights[0].shape
            assert (ours - weights[0]).abs().max() <= bound, (kind, which, layer)
    # cross-attention: target rows × source columns
    assert run.weights("cross", 0).shape[1:] == (len(run.target), len(run.source))


def test_a_written_target_is_greedy_generate_past_an_end_forced_by_the_config(engines, references):
    """BART's generation config forces the end token at the last position (a logits processor): a writing of 3
    tokens ends with it, as generate's does."""
    run = engines["bart"].compute(engines["bart"].pair_spec(SOURCE, max_new_tokens=3))
    model, tokenizer = references["bart"]
    ids = model.generate(tokenizer(SOURCE, return_tensors="pt")["input_ids"], do_sample=False, max_new_tokens=3)
    assert [token.id for token in run.target] == ids[0].tolist()
    assert run.target[-1].id == 2 and run.written


def test_names_are_pinned(engines):
    run = engines["t5"].compute(engines["t5"].pair_spec(SOURCE, TARGET))
    expected = []
    for layer in range(2):
        expected += [f"encoder.blocks.{layer}.attn.{part}" for part in ("q", "k", "v", "position_bias")]
    for layer in range(2):
        expected += [f"decoder.blocks.{layer}.attn.{part}" for part in ("q", "k", "v", "position_bias")]
        expected += [f"decoder.blocks.{layer}.cross_attn.{part}" for part in ("q", "k", "v", "position_bias")]
    assert list(run.activations) == expected
    bart = engines["bart"].compute(engines["bart"].pair_spec(SOURCE, TARGET))
    expected = [name for name in expected if not name.endswith("position_bias")]
    third = [f"decoder.blocks.2.{kind}.{part}" for kind in ("attn", "cross_attn") for part in ("q", "k", "v")]
    assert list(bart.activations) == expected + third  # BART's tiny decoder has 3 blocks
    assert names.stack_attn("decoder", 2, "weights", "cross_attn") == "decoder.blocks.2.cross_attn.weights"
    with pytest.raises(AssertionError):
        names.stack_attn("encoder", 0, "weights", "cross_attn")


def test_no_hook_is_left_on_the_model(engines):
    engine = engines["marian"]
    engine.compute(engine.pair_spec(SOURCE, max_new_tokens=WRITTEN))
    hooked = [
        name
        for name, module in engine.loaded.model.named_modules()
        if module._forward_hooks or module._forward_pre_hooks
    ]
    assert hooked == []


def test_tokens_name_source_and_target(engines):
    engine = engines["t5"]
    run = engine.compute(engine.pair_spec(SOURCE, TARGET))
    assert {token.segment for token in run.source} == {"source"}
    assert {token.segment for token in run.target} == {"target"}
    assert run.target[0].added and run.target[0].special  # the decoder's start token
    words = [TARGET[token.start : token.end] for token in run.target if not token.added]
    assert "".join(words).replace(" ", "") == TARGET.replace(" ", "")


@pytest.mark.parametrize("kind", BUILDERS)
def test_the_memory_stated_before_a_run_holds_both_halves(kind, engines):
    engine = engines[kind]
    run = engine.compute(engine.pair_spec(SOURCE * 3, TARGET))
    made = sum(run.all_weights(which).numel() * 4 for which in KINDS)
    stated = run_bytes(engine, len(run.source), len(run.target))
    assert run.nbytes + made <= stated
    # What the run cache counts of it, stated before its pass for the request that reads it (Lab.serve_pair).
    assert run.nbytes <= kept_bytes(engine, len(run.source), len(run.target)) <= 1.2 * run.nbytes
    # It grows with each half.
    assert run_bytes(engine, 40, 10) > run_bytes(engine, 20, 10)
    assert run_bytes(engine, 20, 20) > run_bytes(engine, 20, 10)


def test_requests_the_engine_refuses(engines):
    engine = engines["bart"]
    with pytest.raises(TextTooLong):
        engine.pair_spec("a" * 1500, "b" * 600)
    with pytest.raises(InvalidInput, match="max_new_tokens"):
        engine.pair_spec(SOURCE, max_new_tokens=0)
    with pytest.raises(InvalidInput, match="not both"):
        engine.pair_spec(SOURCE, TARGET, max_new_tokens=3)
    with pytest.raises(InvalidInput, match="encoder-decoder"):
        engine.spec(SOURCE)
    assert "encoder-decoder" in engine.loaded.cannot_write


def test_specs_are_content_addressed(engines):
    from app.engine.spec import from_canonical

    spec = engines["t5"].pair_spec(SOURCE, TARGET)
    assert from_canonical(spec.canonical()) == spec
    assert spec.run_id != engines["t5"].pair_spec(SOURCE).run_id


# Each family's attention modules in transformers' own model (self-attention in each stack, cross-attention), and
# their W_V and W_O: the test reads the raw weights by these paths, not through the lab.
MODULES = {
    "t5": ("encoder.block.{}.layer.0.SelfAttention", "decoder.block.{}.layer.0.SelfAttention")
    + ("decoder.block.{}.layer.1.EncDecAttention", "v", "o"),
    "bart": ("model.encoder.layers.{}.self_attn", "model.decoder.layers.{}.self_attn")
    + ("model.decoder.layers.{}.encoder_attn", "v_proj", "out_proj"),
}
MODULES["marian"] = MODULES["bart"]


def rms(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * weight


@pytest.mark.parametrize("kind", BUILDERS)
def test_norm_weighted_attention_is_numpys_from_the_raw_weights(kind, engines, references):
    """α_ij ‖(x_j W_V^h + b_V^h) W_O^h‖ in float64 from the folder's weights, x_j the rows each attention reads:
    a block's input (T5's after its RMSNorm), and for cross-attention the encoder's output over the source."""
    engine = engines[kind]
    run = engine.compute(engine.pair_spec(SOURCE, TARGET))
    model, _ = references[kind]
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([[token.id for token in run.source]]),
            decoder_input_ids=torch.tensor([[token.id for token in run.target]]),
            output_attentions=True,
            output_hidden_states=True,
        )
    paths = dict(zip(KINDS, MODULES[kind][:3], strict=True))
    value, output = MODULES[kind][3:]
    attentions = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    states = {"encoder": out.encoder_hidden_states, "decoder": out.decoder_hidden_states}
    config = model.config
    for which in KINDS:
        for layer in range(run.layers(which)):
            module = model.get_submodule(paths[which].format(layer))
            if which == "cross":
                x = out.encoder_last_hidden_state[0].double().numpy()
            else:
                x = states[which][layer][0].double().numpy()
                if kind == "t5":  # pre-RMSNorm: attention reads the block's input normalised
                    stack = model.get_submodule(paths[which].format(layer).rsplit(".", 2)[0])
                    weight = stack.get_submodule("0.layer_norm").weight.detach().double().numpy()
                    x = rms(x, weight, config.layer_norm_epsilon)
            w_v, w_o = module.get_submodule(value), module.get_submodule(output)
            v = x @ w_v.weight.detach().double().numpy().T + (
                0 if w_v.bias is None else w_v.bias.detach().double().numpy()
            )
            heads, d_head = attentions[which][layer].shape[1], v.shape[-1] // attentions[which][layer].shape[1]
            v = v.reshape(len(x), heads, d_head).transpose(1, 0, 2)  # [head, key, d_head]
            o = (
                w_o.weight.detach().double().numpy().reshape(-1, heads, d_head).transpose(1, 2, 0)
            )  # [head, d_head, d_model]
            lengths = np.linalg.norm(v @ o, axis=-1)  # [head, key]
            expected = attentions[which][layer][0].double().numpy() * lengths[:, None, :]
            ours = run.norm(which, layer, engine.w_o(which, layer)).double().numpy()
            bound = 2 * attention_tolerance(config) * lengths.max()
            assert np.abs(ours - expected).max() <= bound, (kind, which, layer)


def test_a_written_target_takes_a_turn_a_token(engines):
    """A server runs a writing's slices one per turn of its gate: the source and the first token, each further
    token, then the pass over both; the run is the one computed here and now."""
    from app.engine.encoder_decoder import slices

    engine = engines["t5"]
    spec = engine.pair_spec(SOURCE, max_new_tokens=WRITTEN)
    results = [piece() for piece in slices(engine, spec)]
    run = results[-1]
    assert len(results) == len(run.target)  # the start token is not written: the last slice is the pass
    assert [token.id for token in run.target] == [token.id for token in engine.compute(spec).target]
