"""Llama-style decoders (Llama, Qwen2, Mistral, SmolLM): pre-RMSNorm blocks, rotary positions applied to
Q and K inside attention, grouped K/V heads, a SwiGLU FFN, a final RMSNorm and the LM head."""

import sys

from app.engine.families.base import Family, Hook, attention_output, ffn_output, inputs, output, split_heads
from app.engine.names import FINAL, LAYER, attn, block, embedding

ROTARY = "rotary"  # cos and sin of the pass, kept until finish() has rotated q and k


def hooks(config) -> tuple[Hook, ...]:
    n, n_kv = config.num_attention_heads, config.num_key_value_heads
    return (
        Hook("embed_tokens", output(embedding("word"))),
        Hook("rotary_emb", lambda args, out: {ROTARY: out}),
        Hook("{block}.self_attn.q_proj", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.self_attn.k_proj", split_heads(attn(LAYER, "k"), n_kv, repeat=n // n_kv)),
        Hook("{block}.self_attn.v_proj", split_heads(attn(LAYER, "v"), n_kv, repeat=n // n_kv)),
        *attention_output("{block}.self_attn.o_proj", n),
        Hook("{block}.post_attention_layernorm", inputs(block(LAYER, "resid_mid")), before=True),  # x + attention
        *ffn_output("{block}.mlp.down_proj"),  # its input: SiLU(x W_gate) ⊙ x W_up
        Hook("{block}", output(block(LAYER, "output"))),
        Hook("norm", output(FINAL)),
    )


def rotate(activations: dict, model) -> None:
    """q and k as the scores use them: rotated by the model's own apply_rotary_pos_emb."""
    cos, sin = activations.pop(ROTARY)
    apply = sys.modules[type(model.base_model.layers[0].self_attn).__module__].apply_rotary_pos_emb
    for layer in range(model.config.num_hidden_layers):
        q, k = attn(layer, "q"), attn(layer, "k")
        # [batch, head, pos, d_head]; cos and sin [batch, pos, d_head]
        activations[q], activations[k] = apply(activations[q], activations[k], cos, sin)


LLAMA = Family(
    name="Llama",
    model_types=("llama", "qwen2", "mistral"),
    blocks="layers",
    hooks=hooks,
    attention_output="self_attn.o_proj",
    normalization="pre-RMSNorm",
    positions="rotary",
    gated_ffn=True,
    decoder=True,
    finish=rotate,
)
