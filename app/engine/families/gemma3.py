"""Gemma 3 (text; EmbeddingGemma): word rows scaled by √d_model, RMSNorms before and after each part of a
block (scaling by 1 + weight), each head's q and k RMS-normalised before RoPE, scores scaled by
1/√query_pre_attn_scalar, grouped K/V heads, local blocks with a sliding window and global ones (`layer_types`,
each with its own RoPE frequencies), a GeGLU FFN without biases, a final RMSNorm. A causal decoder with its LM
head (its logits soft-capped where `final_logit_softcapping` is set), or, where `use_bidirectional_attention`
is set (EmbeddingGemma), an encoder whose local blocks see a window on either side."""

from dataclasses import replace

import torch

from app.engine.families.base import Family, Hook, attention_output, ffn_output, first, inputs, output, split_heads
from app.engine.families.rotary import rotary_embedding, rotating
from app.engine.names import FINAL, LAYER, attn, block, embedding

IDS = "input_ids"  # the pass's ids, kept until finish() has read the word rows: not a name the lab serves


def hooks(config) -> tuple[Hook, ...]:
    n, repeat = config.num_attention_heads, config.num_attention_heads // config.num_key_value_heads
    return (
        # The scaled embedding module: its output is row × √d_model; the row itself is read in finish().
        Hook("embed_tokens", lambda args, out: {IDS: args[0], embedding("scaled"): out}),
        rotary_embedding(),
        # q and k after their per-head RMSNorm: [batch, head, pos, d_head] there; the rotation comes in finish().
        Hook("{block}.self_attn.q_norm", lambda args, out: {attn(LAYER, "q"): first(out)}),
        Hook(
            "{block}.self_attn.k_norm",
            lambda args, out: {attn(LAYER, "k"): first(out).repeat_interleave(repeat, dim=-3)},
        ),
        Hook("{block}.self_attn.v_proj", split_heads(attn(LAYER, "v"), config.num_key_value_heads, repeat)),
        *attention_output("{block}.self_attn.o_proj", n),
        Hook("{block}.pre_feedforward_layernorm", inputs(block(LAYER, "resid_mid")), before=True),
        *ffn_output("{block}.mlp.down_proj"),  # its input: GELU(x W_gate) ⊙ x W_up
        Hook("{block}", output(block(LAYER, "output"))),
        Hook("norm", output(FINAL)),
    )


rotate = rotating("layers", "self_attn")


def finish(activations: dict, model) -> None:
    """The word rows as the table holds them (the embedding module returns them scaled), and q and k rotated."""
    activations[embedding("word")] = torch.nn.functional.embedding(
        activations.pop(IDS), model.get_input_embeddings().weight.detach()
    )
    rotate(activations, model)


GEMMA3 = Family(
    name="Gemma 3",
    model_types=("gemma3_text",),
    blocks="layers",
    hooks=hooks,
    attention_output="self_attn.o_proj",
    attention_norm="post_attention_layernorm",
    norm_offset=1.0,
    qk_norm=True,
    normalization="pre+post-RMSNorm",
    positions="rotary",
    gated_ffn=True,
    decoder=True,
    activation_name=lambda config: config.hidden_activation,
    finish=finish,
    reads=lambda config: not config.use_bidirectional_attention,
)

EMBEDDING_GEMMA = replace(
    GEMMA3, name="Gemma 3 (bidirectional)", decoder=False, reads=lambda config: config.use_bidirectional_attention
)
