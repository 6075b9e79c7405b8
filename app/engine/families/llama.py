"""Llama-style decoders (Llama, Qwen2, Mistral, SmolLM, Qwen3): pre-RMSNorm blocks, rotary positions
applied to Q and K inside attention, grouped K/V heads, a SwiGLU FFN, a final RMSNorm and the LM head.
Qwen3 RMS-normalises each head's q and k (q_norm, k_norm) before the rotation."""

from dataclasses import replace

from app.engine.families.base import Family, Hook, attention_output, ffn_output, first, inputs, output, split_heads
from app.engine.families.rotary import rotary_embedding, rotating
from app.engine.names import FINAL, LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n, n_kv = config.num_attention_heads, config.num_key_value_heads
    return (
        Hook("embed_tokens", output(embedding("word"))),
        rotary_embedding(),
        Hook("{block}.self_attn.q_proj", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.self_attn.k_proj", split_heads(attn(LAYER, "k"), n_kv, repeat=n // n_kv)),
        Hook("{block}.self_attn.v_proj", split_heads(attn(LAYER, "v"), n_kv, repeat=n // n_kv)),
        *attention_output("{block}.self_attn.o_proj", n),
        Hook("{block}.post_attention_layernorm", inputs(block(LAYER, "resid_mid")), before=True),  # x + attention
        *ffn_output("{block}.mlp.down_proj"),  # its input: SiLU(x W_gate) ⊙ x W_up
        Hook("{block}", output(block(LAYER, "output"))),
        Hook("norm", output(FINAL)),
    )


def qwen3_hooks(config) -> tuple[Hook, ...]:
    """Llama's, with q and k read after their per-head RMSNorm: [batch, pos, head, d_head] there."""
    repeat = config.num_attention_heads // config.num_key_value_heads
    normalised = {
        "q": lambda args, out: {attn(LAYER, "q"): first(out).transpose(-3, -2)},
        "k": lambda args, out: {attn(LAYER, "k"): first(out).transpose(-3, -2).repeat_interleave(repeat, dim=-3)},
    }
    kept = [hook for hook in hooks(config) if not hook.module.endswith(("q_proj", "k_proj"))]
    return (
        *kept[:2],
        Hook("{block}.self_attn.q_norm", normalised["q"]),
        Hook("{block}.self_attn.k_norm", normalised["k"]),
        *kept[2:],
    )


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
    finish=rotating("layers", "self_attn"),
)

QWEN3 = replace(LLAMA, name="Qwen3", model_types=("qwen3",), hooks=qwen3_hooks, qk_norm=True)
