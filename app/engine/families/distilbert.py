"""DistilBERT: BERT's post-LN blocks under other names, absolute positions, no token types."""

from app.engine.families.base import Family, Hook, heads, inputs, output, split_heads
from app.engine.names import LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n = config.num_attention_heads
    return (
        Hook("embeddings.word_embeddings", output(embedding("word"))),
        Hook("embeddings.position_embeddings", output(embedding("position"))),
        Hook("embeddings.LayerNorm", inputs(embedding("sum")), before=True),
        Hook("embeddings.LayerNorm", output(embedding("normalized"))),
        Hook("{block}.attention.q_lin", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.attention.k_lin", split_heads(attn(LAYER, "k"), n)),
        Hook("{block}.attention.v_lin", split_heads(attn(LAYER, "v"), n)),
        Hook("{block}.attention.out_lin", lambda args, out: {attn(LAYER, "context"): heads(args[0][0], n)}, True),
        Hook("{block}.attention.out_lin", output(block(LAYER, "attention_output"))),
        Hook("{block}.sa_layer_norm", output(block(LAYER, "resid_mid"))),
        Hook("{block}.ffn.lin2", inputs(block(LAYER, "ffn_intermediate")), before=True),
        Hook("{block}.ffn.lin2", output(block(LAYER, "ffn_output"))),
        Hook("{block}.output_layer_norm", output(block(LAYER, "output"))),
    )


DISTILBERT = Family(
    name="DistilBERT",
    model_types=("distilbert",),
    blocks="transformer.layer",
    hooks=hooks,
    attention_output="attention.out_lin",
    post_attention_norm="sa_layer_norm",
    normalization="post-LN",
    positions="absolute",
    ffn="GELU",
    ffn_size=lambda config: config.hidden_dim,
)
