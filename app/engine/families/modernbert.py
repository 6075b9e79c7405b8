"""ModernBERT (ModernBERT-embed, gte-modernbert): an encoder with rotary positions, pre-LN blocks (block 0
reads the embedding LayerNorm's output as it is), one fused Q/K/V projection, global blocks and local ones
that see a sliding window on either side (`global_attn_every_n_layers`, `local_attention`), a GeGLU FFN,
LayerNorms and projections without biases, and a final LayerNorm."""

from app.engine.families.base import Family, Hook, attention_output, ffn_output, first, heads, inputs, output
from app.engine.families.rotary import rotary_embedding, rotating
from app.engine.names import FINAL, LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n = config.num_attention_heads

    def qkv(args, out):  # Wqkv: [batch, pos, 3·d_model], Q then K then V, each head after head
        q, k, v = first(out).chunk(3, dim=-1)
        return {attn(LAYER, "q"): heads(q, n), attn(LAYER, "k"): heads(k, n), attn(LAYER, "v"): heads(v, n)}

    return (
        Hook("embeddings.tok_embeddings", output(embedding("word"))),
        Hook("embeddings.norm", output(embedding("normalized"))),
        rotary_embedding(),
        Hook("{block}.attn.Wqkv", qkv),
        *attention_output("{block}.attn.Wo", n),
        Hook("{block}.mlp_norm", inputs(block(LAYER, "resid_mid")), before=True),  # x + attention
        *ffn_output("{block}.mlp.Wo"),  # its input: GELU(x W_in) ⊙ x W_gate, the two halves of Wi
        Hook("{block}", output(block(LAYER, "output"))),
        Hook("final_norm", output(FINAL)),
    )


MODERNBERT = Family(
    name="ModernBERT",
    model_types=("modernbert",),
    blocks="layers",
    hooks=hooks,
    attention_output="attn.Wo",
    normalization="pre-LN",
    positions="rotary",
    gated_ffn=True,
    activation_name=lambda config: config.hidden_activation,
    finish=rotating("layers", "attn"),
)
