"""DistilBERT: BERT's post-LN blocks under other names, absolute positions, no token types."""

from app.engine.families.base import (
    Family,
    Hook,
    attention_output,
    ffn_output,
    output,
    split_heads,
    summed_embeddings,
)
from app.engine.names import LAYER, attn, block, embedding


def hooks(config) -> tuple[Hook, ...]:
    n = config.num_attention_heads
    return (
        Hook("embeddings.word_embeddings", output(embedding("word"))),
        Hook("embeddings.position_embeddings", output(embedding("position"))),
        *summed_embeddings("embeddings.LayerNorm"),
        Hook("{block}.attention.q_lin", split_heads(attn(LAYER, "q"), n)),
        Hook("{block}.attention.k_lin", split_heads(attn(LAYER, "k"), n)),
        Hook("{block}.attention.v_lin", split_heads(attn(LAYER, "v"), n)),
        *attention_output("{block}.attention.out_lin", n),
        Hook("{block}.sa_layer_norm", output(block(LAYER, "resid_mid"))),
        *ffn_output("{block}.ffn.lin2"),
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
    gated_ffn=False,
    ffn_size=lambda config: config.hidden_dim,
    activation_name=lambda config: config.activation,
)
