"""GPT-2: a causal decoder, pre-LN blocks, learned absolute positions, one fused Q/K/V projection (a
Conv1D), GELU FFN, a final LayerNorm and the LM head."""

from app.engine.families.base import Family, Hook, attention_output, ffn_output, first, heads, inputs, output
from app.engine.names import FINAL, LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n, d = config.num_attention_heads, config.hidden_size

    def qkv(args, out):  # c_attn: [pos, 3·d_model], Q then K then V
        q, k, v = first(out).split(d, dim=-1)
        return {attn(LAYER, "q"): heads(q, n), attn(LAYER, "k"): heads(k, n), attn(LAYER, "v"): heads(v, n)}

    return (
        Hook("wte", output(embedding("word"))),
        Hook("wpe", output(embedding("position"))),
        Hook("drop", output(embedding("sum"))),  # wte + wpe: block 0's input
        Hook("{block}.attn.c_attn", qkv),
        *attention_output("{block}.attn.c_proj", n),
        Hook("{block}.ln_2", inputs(block(LAYER, "resid_mid")), before=True),  # x + attention
        *ffn_output("{block}.mlp.c_proj"),
        Hook("{block}", output(block(LAYER, "output"))),
        Hook("ln_f", output(FINAL)),
    )


GPT2 = Family(
    name="GPT-2",
    model_types=("gpt2",),
    blocks="h",
    hooks=hooks,
    attention_output="attn.c_proj",
    normalization="pre-LN",
    positions="absolute",
    gated_ffn=False,
    ffn_size=lambda config: config.n_inner or 4 * config.hidden_size,
    activation_name=lambda config: config.activation_function,
    decoder=True,
)
